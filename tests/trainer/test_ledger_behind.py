"""A ledger slower than its trainers answers ``future_round`` (it has not committed the rounds
before): the node waits for it (backpressure) instead of training ahead and dying on the refusal.

The ledger here is a real HTTP server on 127.0.0.1 that answers in the ledger's error format; it
stays behind for a set number of requests, then catches up.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
import torch

from protocol.eip712 import Eip712Domain
from protocol.keys import NodeKey
from tests.trainer.fake_ledger import LedgerHandler
from tests.trainer.nodes import DEV_KEYS, RUN_ID
from trainer.network.ledger_client import LedgerClient, RetryPolicy
from trainer.round.attest import Attester, WorkRecord

BEHIND = {"error": {"code": "future_round", "message": "round 4 is in the future"}}


class _Ledger(ThreadingHTTPServer):
    behind_for = 0  # requests answered future_round before the ledger catches up
    seen: list[str]


class _Handler(LedgerHandler):
    server: _Ledger

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.server.seen.append(self.path)
        if self.server.behind_for > 0:
            self.server.behind_for -= 1
            self._answer(422, BEHIND)
        elif self.path.startswith("/v1/joins"):
            self._answer(200, {"accepted": True})
        else:
            self._answer(202, {"id": 7})


@pytest.fixture
def ledger() -> Iterator[_Ledger]:
    server = _Ledger(("127.0.0.1", 0), _Handler)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _attester(ledger: _Ledger, wait_s: float) -> Attester:
    key = NodeKey.from_private_key(bytes.fromhex(DEV_KEYS[1][2:]))
    domain = Eip712Domain(chain_id=31337, verifying_contract=key.address)
    host, port = ledger.server_address[:2]
    client = LedgerClient(f"http://{host!s}:{port}", retry=RetryPolicy(attempts=1))
    return Attester(key, domain, RUN_ID, client, behind_wait_s=wait_s, behind_poll_s=0.01)


def test_a_join_waits_for_a_ledger_that_is_behind(ledger: _Ledger) -> None:
    ledger.behind_for = 5
    assert _attester(ledger, wait_s=30).join(4) is True
    assert ledger.seen.count("/v1/joins") == 6, "asked again until the ledger caught up"


def test_the_wait_is_bounded(ledger: _Ledger) -> None:
    ledger.behind_for = 10**9
    attester = _attester(ledger, wait_s=0.2)
    assert attester.join(4) is True  # gives up waiting: the attestation decides later
    assert len(ledger.seen) >= 2


def test_an_attestation_refused_as_future_is_kept_and_drained_later(ledger: _Ledger) -> None:
    attester = _attester(ledger, wait_s=30)
    work = WorkRecord(4, 0, bytes(32), {"w": torch.ones(3)}, bytes(32), 1, 32, bytes(32), bytes(32))
    ledger.behind_for = 1
    signed = attester.publish(work, [attester.address])
    assert signed.ledger_id is None and [p.attestation.round for p in attester.backlog] == [4]
    ledger.behind_for = 3
    attester.drain()
    assert attester.backlog == []
