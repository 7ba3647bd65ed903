"""Checkpoints peer to peer: every member serves the checkpoint it holds; a joiner fetches its
chunks from several members at once and checks each one.

A member that finished round r holds the same checkpoint blob as every other honest member (the
outer step is bit-exact, the blob encoding canonical). It describes it by a :class:`Manifest`
(weights hash, size, chunk size, and ``chunks_root`` = sha256 of the chunks' sha256 digests),
signs that in its ``CHECKPOINT`` coordination message with the address of its
:class:`CheckpointServer`, and serves the blob from memory in a background thread, so a joiner
fetches while the members keep training. Nothing of the blob goes through the rendezvous store.

:func:`fetch` (the joiner, :mod:`trainer.network.checkpoint_fetch`) first gets the digest list
from any peer and checks it against the signed root, then pulls the chunks from all peers in
parallel and checks each against its digest: a peer that serves a wrong chunk, a wrong header, or
nothing within the chunk deadline, is dropped for the rest of the fetch and its chunk is fetched
from another peer. The caller then checks the whole blob against the weights hash the chain
committed or a majority of the round signed (:mod:`trainer.round.recovery`).

Threat model. The server is read-only, serves only blobs this node offered itself, answers at most
``max_concurrent`` requests at a time and ``per_client`` from one address (others get 503), keeps
``per_client_connections`` connections per address, answers ``max_requests_per_connection``
pipelined requests on one, closes a connection whose response is not written within
``write_deadline_s`` (a reader that never reads) and drops idle sockets after ``timeout_s``
(tests/trainer/test_checkpoint_server_limits.py).
The client reads at most the announced chunk length from a peer, cuts every request off at its
deadline, ends the whole fetch at its own, and trusts no byte it did not hash: a bad peer wastes
at most one chunk per connection (``per_peer``) of a joiner's bandwidth, and one chunk deadline of
its time, before it is dropped (tests/trainer/test_peer_checkpoint_faults.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trainer.network.checkpoint_fetch import FetchError, PeerFault, fetch
from trainer.network.checkpoint_manifest import (
    CHUNK_BYTES,
    MAX_BLOB_BYTES,
    MAX_CHUNK_BYTES,
    MIN_CHUNK_BYTES,
    Manifest,
)

__all__ = ["CHUNK_BYTES", "MAX_BLOB_BYTES", "MAX_CHUNK_BYTES", "MIN_CHUNK_BYTES",
           "CheckpointServer", "FetchError", "Manifest", "PeerFault", "fetch"]  # fmt: skip

log = logging.getLogger(__name__)

_PIECE = 1 << 16


@dataclass(frozen=True)
class _Offer:
    blob: bytes
    digests: bytes
    manifest: Manifest


class _HTTPServer(ThreadingHTTPServer):
    """Refuses a connection beyond ``per_client_connections`` open ones from one address."""

    daemon_threads = True
    owner: CheckpointServer

    def verify_request(self, request: Any, client_address: Any) -> bool:
        return self.owner._connect(request, str(client_address[0]))

    def shutdown_request(self, request: Any) -> None:
        self.owner._disconnect(request)
        super().shutdown_request(request)


class CheckpointServer:
    """Serves this node's last ``keep`` checkpoints over HTTP, from a daemon thread.

    ``GET /v1/ckpt/<round>/<chunks_root>/digests`` and ``.../chunk/<i>``; anything else is 404.
    Bounds (a client that never reads, pipelines requests, or opens many connections): at most
    ``max_concurrent`` requests served at once and ``per_client`` of them from one address
    (others get 503), ``per_client_connections`` open connections per address (more are
    closed at once), ``max_requests_per_connection`` requests on one connection (the last is
    answered with ``Connection: close``), each response written within ``write_deadline_s`` or
    the connection is closed, and an idle connection dropped after ``timeout_s``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        keep: int = 2,
        max_concurrent: int = 16,
        per_client: int = 4,
        per_client_connections: int = 8,
        max_requests_per_connection: int = 64,
        write_deadline_s: float = 30.0,
        timeout_s: float = 30.0,
    ) -> None:
        self.keep = keep
        self.per_client = per_client
        self.per_client_connections = per_client_connections
        self.max_requests_per_connection = max_requests_per_connection
        self.write_deadline_s = write_deadline_s
        self._offers: dict[int, _Offer] = {}
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._busy: Counter[str] = Counter()
        self._open: dict[Any, str] = {}
        self.bytes_served = 0
        handler = type("Handler", (_Handler,), {"owner": self, "timeout": timeout_s})
        self._httpd = _HTTPServer((host, port), handler)
        self._httpd.owner = self
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

    def _connect(self, request: Any, client: str) -> bool:
        with self._lock:
            if sum(1 for c in self._open.values() if c == client) >= self.per_client_connections:
                log.info("ckpt server: refusing a connection from %s: %d open already", client,
                         self.per_client_connections)  # fmt: skip
                return False
            self._open[request] = client
            return True

    def _disconnect(self, request: Any) -> None:
        with self._lock:
            self._open.pop(request, None)

    def _acquire(self, client: str) -> bool:
        """A request slot for ``client``, if one is free for it (never blocks)."""
        with self._lock:
            if self._busy[client] >= self.per_client:
                return False
            if not self._slots.acquire(blocking=False):
                return False
            self._busy[client] += 1
            return True

    def _release(self, client: str) -> None:
        with self._lock:
            self._busy[client] -= 1
            if self._busy[client] <= 0:
                del self._busy[client]
            self._slots.release()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    owner: CheckpointServer
    protocol_version = "HTTP/1.1"
    requests_here = 0

    def do_GET(self) -> None:
        self.requests_here += 1
        client = str(self.client_address[0])
        if not self.owner._acquire(client):
            self._send(503, b"busy: retry later or fetch from another member")
            return
        try:
            self._serve()
        finally:
            self.owner._release(client)

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
        """The response, written within the write deadline or the connection is closed."""
        last = self.requests_here >= self.owner.max_requests_per_connection
        deadline = time.monotonic() + self.owner.write_deadline_s
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/octet-stream")
        if last:
            self.send_header("Connection", "close")
            self.close_connection = True
        try:
            self._time_left(deadline)
            self.end_headers()
            view = memoryview(body)
            for i in range(0, len(body), _PIECE):
                self._time_left(deadline)
                self.connection.sendall(view[i : i + _PIECE])
        except OSError as exc:  # too slow a reader (or gone): free the slot, drop the socket
            log.info("ckpt server: closing %s: response not written within %.0fs (%s)",
                     self.client_address[0], self.owner.write_deadline_s, exc)  # fmt: skip
            self.close_connection = True
            return
        finally:
            self.connection.settimeout(self.timeout)
        if status == 200:
            with self.owner._lock:
                self.owner.bytes_served += len(body)

    def _time_left(self, deadline: float) -> None:
        """The socket's next write may take what is left until ``deadline`` (sendall's timeout
        bounds the whole call); none left: TimeoutError."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("write deadline passed")
        self.connection.settimeout(left)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("ckpt server: " + format, *args)
