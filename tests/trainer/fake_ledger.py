"""The part every fake ledger of the trainer tests shares: a real HTTP handler on 127.0.0.1 that
answers in JSON, takes blob uploads, and keeps quiet. Each test subclasses it with its own POST."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler


class LedgerHandler(BaseHTTPRequestHandler):
    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:  # blob upload
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self._answer(200, {"ok": True})

    def log_message(self, *args: object) -> None:
        pass
