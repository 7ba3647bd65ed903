"""Checkpoints peer to peer: every member serves the checkpoint it holds; a joiner fetches its
chunks from several members at once and checks each one.

A member that finished round r holds the same checkpoint blob as every other honest member (the
outer step is bit-exact, the blob encoding canonical). It describes it by a :class:`Manifest`
(weights hash, size, chunk size, and ``chunks_root`` = sha256 of the chunks' sha256 digests),
signs that in its ``CHECKPOINT`` coordination message with the address of its
:class:`CheckpointServer`, and serves the blob from memory in a background thread, so a joiner
fetches while the members keep training. Nothing of the blob goes through the rendezvous store.

:func:`fetch` (the joiner) first gets the digest list from any peer and checks it against the
signed root, then pulls the chunks from all peers in parallel and checks each against its digest:
a peer that serves a wrong chunk, or fails, is dropped for the rest of the fetch and its chunk is
fetched from another peer. The caller then checks the whole blob against the weights hash the chain
committed or a majority of the round signed (:mod:`trainer.round.recovery`).

Threat model. The server is read-only, serves only blobs this node offered itself, answers at most
``max_concurrent`` requests at a time (others get 503) and drops idle sockets after ``timeout_s``.
The client reads at most the announced chunk length from a peer, times out, and trusts no byte it
did not hash: a peer can waste one chunk's worth of a joiner's bandwidth before it is dropped.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import threading
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from protocol.errors import CheckpointError

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
MIN_CHUNK_BYTES = 1 << 12
MAX_CHUNK_BYTES = 1 << 26
MAX_BLOB_BYTES = 8 * 1024**3


@dataclass(frozen=True)
class Manifest:
    """What a member signs about the checkpoint blob it serves."""

    weights_hash: bytes
    size: int
    chunk_bytes: int
    chunks_root: bytes

    @classmethod
    def of(
        cls, blob: bytes, weights_hash: bytes, chunk_bytes: int = CHUNK_BYTES
    ) -> tuple[Manifest, bytes]:
        """The manifest of ``blob`` and its concatenated chunk digests (32 bytes each)."""
        digests = b"".join(
            hashlib.sha256(blob[i : i + chunk_bytes]).digest()
            for i in range(0, len(blob), chunk_bytes)
        )
        root = hashlib.sha256(digests).digest()
        return cls(weights_hash, len(blob), chunk_bytes, root), digests

    @property
    def n_chunks(self) -> int:
        return -(-self.size // self.chunk_bytes)

    def span(self, i: int) -> tuple[int, int]:
        start = i * self.chunk_bytes
        return start, min(self.size, start + self.chunk_bytes)

    def body(self) -> dict[str, Any]:
        return {"hash": self.weights_hash.hex(), "size": self.size,
                "chunk_bytes": self.chunk_bytes, "chunks_root": self.chunks_root.hex()}  # fmt: skip

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Manifest:
        """Parse a signed ``CHECKPOINT`` body; malformed or out-of-bounds values raise."""
        try:
            weights_hash = bytes.fromhex(str(body["hash"]))
            root = bytes.fromhex(str(body["chunks_root"]))
            size, chunk = body["size"], body["chunk_bytes"]
        except (KeyError, ValueError) as exc:
            raise CheckpointError(f"checkpoint offer lacks a valid manifest: {exc}") from exc
        if len(weights_hash) != 32 or len(root) != 32:
            raise CheckpointError("checkpoint offer: hash and chunks_root must be 32 bytes")
        if not isinstance(size, int) or not 0 < size <= MAX_BLOB_BYTES:
            raise CheckpointError(f"checkpoint offer: size {size!r} outside 1..{MAX_BLOB_BYTES}")
        if not isinstance(chunk, int) or not MIN_CHUNK_BYTES <= chunk <= MAX_CHUNK_BYTES:
            raise CheckpointError(f"checkpoint offer: chunk_bytes {chunk!r} outside "
                                  f"{MIN_CHUNK_BYTES}..{MAX_CHUNK_BYTES}")  # fmt: skip
        return cls(weights_hash, size, chunk, root)


@dataclass(frozen=True)
class _Offer:
    blob: bytes
    digests: bytes
    manifest: Manifest


class CheckpointServer:
    """Serves this node's last ``keep`` checkpoints over HTTP, from a daemon thread.

    ``GET /v1/ckpt/<round>/<chunks_root>/digests`` and ``.../chunk/<i>``; anything else is 404.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        keep: int = 2,
        max_concurrent: int = 16,
        timeout_s: float = 30.0,
    ) -> None:
        self.keep = keep
        self._offers: dict[int, _Offer] = {}
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self.bytes_served = 0
        handler = type("Handler", (_Handler,), {"owner": self, "timeout": timeout_s})
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="ckpt-server",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        bound_host, bound_port = self._httpd.server_address[:2]
        self.endpoint = f"{bound_host if isinstance(bound_host, str) else host}:{bound_port}"
        log.info("serving checkpoints at http://%s", self.endpoint)

    def offer(self, round: int, blob: bytes, digests: bytes, manifest: Manifest) -> None:
        with self._lock:
            self._offers[round] = _Offer(blob, digests, manifest)
            for old in sorted(self._offers)[: -self.keep]:
                del self._offers[old]

    def _find(self, round: int, root_hex: str) -> _Offer | None:
        with self._lock:
            offer = self._offers.get(round)
        return offer if offer is not None and offer.manifest.chunks_root.hex() == root_hex else None

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    owner: CheckpointServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if not self.owner._slots.acquire(blocking=False):
            self._send(503, b"busy: retry later or fetch from another member")
            return
        try:
            self._serve()
        finally:
            self.owner._slots.release()

    def _serve(self) -> None:
        parts = self.path.strip("/").split("/")
        if len(parts) < 5 or parts[:2] != ["v1", "ckpt"] or not parts[2].isdigit():
            self._send(404, b"not a checkpoint path")
            return
        offer = self.owner._find(int(parts[2]), parts[3])
        if offer is None:
            self._send(404, b"this member does not hold that checkpoint")
            return
        if parts[4:] == ["digests"]:
            self._send(200, offer.digests)
        elif len(parts) == 6 and parts[4] == "chunk" and parts[5].isdigit():
            i = int(parts[5])
            if i >= offer.manifest.n_chunks:
                self._send(404, b"no such chunk")
                return
            start, end = offer.manifest.span(i)
            self._send(200, offer.blob[start:end])
        else:
            self._send(404, b"not a checkpoint path")

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        self.wfile.write(body)
        if status == 200:
            with self.owner._lock:
                self.owner.bytes_served += len(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("ckpt server: " + format, *args)


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


class _Peer:
    def __init__(self, endpoint: str, timeout_s: float) -> None:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise CheckpointError(f"peer endpoint {endpoint!r} is not HOST:PORT")
        self.endpoint = endpoint
        self.conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)

    def get(self, path: str, length: int) -> bytes:
        """Exactly ``length`` bytes from ``path``, or an error naming what went wrong."""
        try:
            self.conn.request("GET", path)
            resp = self.conn.getresponse()
            announced = resp.getheader("Content-Length")
            if resp.status != 200 or announced != str(length):
                resp.read(min(int(announced or 0), 4096))
                raise CheckpointError(f"HTTP {resp.status}, {announced} bytes for {length}")
            data = resp.read(length)
        except (OSError, http.client.HTTPException) as exc:
            self.conn.close()
            raise CheckpointError(f"{type(exc).__name__}: {exc}") from exc
        if len(data) != length:
            raise CheckpointError(f"short read: {len(data)} of {length} bytes")
        return data

    def close(self) -> None:
        self.conn.close()


def _path(round: int, manifest: Manifest, tail: str) -> str:
    return f"/v1/ckpt/{round}/{manifest.chunks_root.hex()}/{tail}"


def _digests(
    round: int, manifest: Manifest, peers: list[_Peer], faults: list[PeerFault]
) -> tuple[list[bytes], set[str]]:
    bad: set[str] = set()
    n = manifest.n_chunks
    for peer in peers:
        try:
            raw = peer.get(_path(round, manifest, "digests"), 32 * n)
            if hashlib.sha256(raw).digest() != manifest.chunks_root:
                raise CheckpointError("digest list does not hash to the signed chunks_root")
            return [raw[32 * i : 32 * (i + 1)] for i in range(n)], bad
        except CheckpointError as exc:
            faults.append(PeerFault(peer.endpoint, -1, exc.message))
            bad.add(peer.endpoint)
    raise FetchError(f"no peer served round {round}'s chunk digests: {faults}", faults)


def fetch(
    round: int,
    manifest: Manifest,
    endpoints: list[str],
    *,
    per_peer: int = 2,
    timeout_s: float = 30.0,
) -> tuple[bytes, list[PeerFault]]:
    """The blob ``manifest`` describes, from ``endpoints`` in parallel, every chunk hash-checked.

    Returns the blob and the faults seen (peers dropped). Raises CheckpointError when some chunk
    could not be had from any peer."""
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
        digests, bad = _digests(round, manifest, probes, faults)
    finally:
        for p in probes:
            p.close()
    buf = bytearray(manifest.size)
    todo: deque[int] = deque(range(manifest.n_chunks))
    state = {"in_flight": 0}
    cond = threading.Condition()

    def worker(endpoint: str) -> None:
        peer = _Peer(endpoint, timeout_s)
        try:
            while True:
                with cond:
                    while not todo and state["in_flight"] and endpoint not in bad:
                        cond.wait()
                    if not todo or endpoint in bad:
                        return
                    i = todo.popleft()
                    state["in_flight"] += 1
                start, end = manifest.span(i)
                try:
                    data = peer.get(_path(round, manifest, f"chunk/{i}"), end - start)
                    if hashlib.sha256(data).digest() != digests[i]:
                        raise CheckpointError(f"chunk {i} does not match its signed digest")
                    buf[start:end] = data
                    ok = True
                except CheckpointError as exc:
                    ok = False
                    log.warning("checkpoint fetch: dropping peer %s: %s", endpoint, exc.message)
                    with cond:
                        faults.append(PeerFault(endpoint, i, exc.message))
                        bad.add(endpoint)
                with cond:
                    state["in_flight"] -= 1
                    if not ok:
                        todo.appendleft(i)
                    cond.notify_all()
        finally:
            peer.close()

    threads = [threading.Thread(target=worker, args=(e,), daemon=True, name=f"ckpt-fetch-{e}")
               for e in endpoints if e not in bad for _ in range(per_peer)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if todo:
        raise FetchError(
            f"round {round}'s checkpoint: {len(todo)} of {manifest.n_chunks} chunks could not be "
            f"fetched from any of {len(endpoints)} peers ({[f.reason for f in faults]}); retry",
            faults,
        )
    return bytes(buf), faults
