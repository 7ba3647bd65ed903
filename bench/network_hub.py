"""The hub namespace of ``bench.network``: the rendezvous store and the ledger's blob intake.

    ip netns exec HUB python -m bench.network_hub --port P --ledger-port L

Hosts the TCPStore the nodes rendezvous on, and answers ``PUT /v1/blobs/{hash}`` as the ledger
does: the blob must be a safetensors file whose canonical tensor hash is ``hash``
(:func:`protocol.blobs.blob_id`, the check ``ledger.core.blobstore.BlobStore.put`` makes), else 422.
The bytes are verified and dropped: the benchmark measures what nodes send, not the disk.
Runs until killed.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch.distributed as dist

from protocol.blobs import blob_id
from protocol.errors import EncodingError

log = logging.getLogger("bench.network_hub")
MAX_BLOB = 256 << 20


class BlobIntake(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    received = 0
    lock = threading.Lock()

    def do_PUT(self) -> None:
        want = self.path.removeprefix("/v1/blobs/").lower()
        size = int(self.headers.get("Content-Length", "0"))
        if not self.path.startswith("/v1/blobs/") or not 0 < size <= MAX_BLOB:
            self._answer(422, {"code": "bad_blob", "message": "PUT /v1/blobs/{hash} with a body"})
            return
        data = self.rfile.read(size)
        try:
            actual = "0x" + bytes(blob_id(data, max_bytes=MAX_BLOB)).hex()
        except EncodingError as exc:
            self._answer(422, {"code": "bad_blob", "message": str(exc)})
            return
        if actual != want:
            self._answer(422, {"code": "blob_hash_mismatch", "message": f"hashes to {actual}"})
            return
        with BlobIntake.lock:
            BlobIntake.received += size
        self._answer(201, {"hash": actual, "size": size})

    def _answer(self, status: int, body: dict[str, object]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: object) -> None:
        log.debug(format, *args)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ledger-port", type=int, required=True)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO)
    store = dist.TCPStore(  # type: ignore[attr-defined]
        "0.0.0.0", args.port, is_master=True, wait_for_workers=False,
        timeout=timedelta(seconds=900),
    )  # fmt: skip
    server = ThreadingHTTPServer(("0.0.0.0", args.ledger_port), BlobIntake)
    print("hub ready", flush=True)
    try:
        server.serve_forever()
    finally:
        del store


if __name__ == "__main__":
    main()
