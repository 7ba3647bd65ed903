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
``max_concurrent`` requests at a time (others get 503) and drops idle sockets after ``timeout_s``.
The client reads at most the announced chunk length from a peer, cuts every request off at its
deadline, ends the whole fetch at its own, and trusts no byte it did not hash: a bad peer wastes
at most one chunk per connection (``per_peer``) of a joiner's bandwidth, and one chunk deadline of
its time, before it is dropped (tests/trainer/test_peer_checkpoint_faults.py).
"""

from __future__ import annotations

import logging
import threading
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
