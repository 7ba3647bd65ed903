"""The joiner's side of a peer-to-peer checkpoint fetch: chunks from several peers at once, each
one hash-checked, under deadlines no peer can stretch.

:func:`fetch` first gets the digest list from any peer and checks it against the signed root, then
pulls the chunks from all peers in parallel (``per_peer`` connections each) and checks each against
its digest. A peer that answers with a wrong status, length or header, a chunk that does not match
its digest, a broken connection, or nothing within the chunk deadline is dropped for the rest of
the fetch, and its chunk goes back to the queue for another peer (in ``finally``: whatever the
worker died of). Bounds, whatever a peer sends:

- one request's whole response (headers and body) must arrive within ``timeout_s``: a timer
  shuts the socket down at that deadline, so a peer that trickles a byte at a time is cut off
  like a silent one;
- the whole fetch ends at ``deadline_s``: every request's deadline is capped by it and no
  worker waits past it;
- a peer is sent at most ``per_peer`` chunk requests that fail (one per connection): a bad
  peer wastes at most that many chunks of bandwidth and one chunk deadline of time.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass

from protocol.errors import CheckpointError
from trainer.network.checkpoint_manifest import Manifest

log = logging.getLogger(__name__)

DEFAULT_DEADLINE_S = 600.0


class FetchError(CheckpointError):
    """No peer could serve some part of the checkpoint; ``faults`` names who failed how."""

    def __init__(self, message: str, faults: list[PeerFault]) -> None:
        super().__init__(message)
        self.faults = faults


@dataclass(frozen=True)
class PeerFault:
    """A peer dropped during a fetch: ``chunk`` is -1 for the digest list."""

    peer: str
    chunk: int
    reason: str


def _content_length(raw: str | None) -> int | None:
    """The announced length as a number, or None when it is missing or not a plain number."""
    return int(raw) if raw is not None and raw.isdigit() and len(raw) <= 19 else None


class _Peer:
    def __init__(self, endpoint: str, timeout_s: float) -> None:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise CheckpointError(f"peer endpoint {endpoint!r} is not HOST:PORT")
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
        self._cut = False

    def _cut_off(self) -> None:
        """The request's deadline passed: break the blocked read (whatever the peer sends)."""
        self._cut = True
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)

    def get(self, path: str, length: int, deadline: float) -> bytes:
        """Exactly ``length`` bytes from ``path`` by the monotonic ``deadline``, or an error
        naming what went wrong."""
        left = min(self.timeout_s, deadline - time.monotonic())
        if left <= 0:
            raise CheckpointError("the fetch deadline passed before this request")
        self._cut = False
        timer = threading.Timer(left, self._cut_off)
        timer.daemon = True
        timer.start()
        try:
            return self._request(path, length)
        except (OSError, http.client.HTTPException, CheckpointError) as exc:
            self.conn.close()  # the peer is dropped; nothing more is read from this socket
            if self._cut:
                raise CheckpointError(
                    f"no full response within the chunk deadline ({left:.3g}s)"
                ) from exc
            if isinstance(exc, CheckpointError):
                raise
            raise CheckpointError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            timer.cancel()

    def _request(self, path: str, length: int) -> bytes:
        self.conn.request("GET", path)
        resp = self.conn.getresponse()
        raw = resp.getheader("Content-Length")
        if resp.status != 200 or _content_length(raw) != length:
            raise CheckpointError(
                f"HTTP {resp.status} with Content-Length {raw!r} where {length} bytes were due"
            )
        data = resp.read(length)
        if len(data) != length:
            raise CheckpointError(f"short read: {len(data)} of {length} bytes")
        return data

    def close(self) -> None:
        self.conn.close()


def _path(round: int, manifest: Manifest, tail: str) -> str:
    return f"/v1/ckpt/{round}/{manifest.chunks_root.hex()}/{tail}"


def _digests(
    round: int,
    manifest: Manifest,
    peers: list[_Peer],
    faults: list[PeerFault],
    *,
    deadline: float,
    deadline_s: float,
) -> tuple[list[bytes], set[str]]:
    bad: set[str] = set()
    n = manifest.n_chunks
    for peer in peers:
        try:
            raw = peer.get(_path(round, manifest, "digests"), 32 * n, deadline)
            if hashlib.sha256(raw).digest() != manifest.chunks_root:
                raise CheckpointError("digest list does not hash to the signed chunks_root")
            return [raw[32 * i : 32 * (i + 1)] for i in range(n)], bad
        except CheckpointError as exc:
            faults.append(PeerFault(peer.endpoint, -1, exc.message))
            bad.add(peer.endpoint)
    late = time.monotonic() >= deadline
    raise FetchError(f"no peer served round {round}'s chunk digests"
                     + (f" within the fetch deadline ({deadline_s:g}s)" if late else "")
                     + f": {faults}", faults)  # fmt: skip


def fetch(
    round: int,
    manifest: Manifest,
    endpoints: list[str],
    *,
    per_peer: int = 2,
    timeout_s: float = 30.0,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> tuple[bytes, list[PeerFault]]:
    """The blob ``manifest`` describes, from ``endpoints`` in parallel, every chunk hash-checked.

    ``timeout_s`` bounds each request (its whole response), ``deadline_s`` the whole fetch.
    Returns the blob and the faults seen (peers dropped). Raises FetchError when some chunk
    could not be had from any peer within the deadline."""
    deadline = time.monotonic() + deadline_s
    faults: list[PeerFault] = []
    probes = []
    for e in endpoints:
        try:
            probes.append(_Peer(e, timeout_s))
        except CheckpointError as exc:  # a member's signed offer names no usable address
            faults.append(PeerFault(e, -1, exc.message))
    if not probes:
        raise FetchError(f"no usable peer offers round {round}'s checkpoint", faults)
    endpoints = [p.endpoint for p in probes]
    try:
        digests, bad = _digests(round, manifest, probes, faults, deadline=deadline,
                               deadline_s=deadline_s)  # fmt: skip
    finally:
        for p in probes:
            p.close()
    buf = bytearray(manifest.size)
    todo: deque[int] = deque(range(manifest.n_chunks))
    in_flight = [0]
    cond = threading.Condition()

    def take(endpoint: str) -> int | None:
        """The next chunk for ``endpoint``'s worker; None: nothing left for it to do."""
        with cond:
            while not todo and in_flight[0] and endpoint not in bad:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                cond.wait(left)
            if not todo or endpoint in bad or time.monotonic() >= deadline:
                return None
            in_flight[0] += 1
            return todo.popleft()

    def worker(endpoint: str) -> None:
        peer = _Peer(endpoint, timeout_s)
        try:
            while (i := take(endpoint)) is not None:
                start, end = manifest.span(i)
                ok = False
                try:
                    data = peer.get(_path(round, manifest, f"chunk/{i}"), end - start, deadline)
                    if hashlib.sha256(data).digest() != digests[i]:
                        raise CheckpointError(f"chunk {i} does not match its signed digest")
                    buf[start:end] = data
                    ok = True
                except Exception as exc:  # whatever the peer did: it is dropped, not the fetch
                    reason = exc.message if isinstance(exc, CheckpointError) else repr(exc)
                    log.warning("checkpoint fetch: dropping peer %s: %s", endpoint, reason)
                    with cond:
                        faults.append(PeerFault(endpoint, i, reason))
                        bad.add(endpoint)
                finally:
                    with cond:
                        in_flight[0] -= 1
                        if not ok:
                            todo.appendleft(i)
                        cond.notify_all()
        finally:
            peer.close()

    threads = [threading.Thread(target=worker, args=(e,), daemon=True, name=f"ckpt-fetch-{e}")
               for e in endpoints if e not in bad for _ in range(per_peer)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:  # every request ends by the deadline (its timer), every wait too
        t.join(max(0.0, deadline - time.monotonic()) + timeout_s)
    with cond:
        missing = len(todo) + in_flight[0]
    if missing:
        late = time.monotonic() >= deadline
        raise FetchError(
            f"round {round}'s checkpoint: {missing} of {manifest.n_chunks} chunks could not be "
            f"fetched from any of {len(endpoints)} peers"
            + (f" within the fetch deadline ({deadline_s:g}s)" if late else "")
            + f" ({[f.reason for f in faults]}); retry",
            faults,
        )
    return bytes(buf), faults
