"""The node's journal: signed attestations on disk until the ledger acknowledged them.

The ledger here is a real HTTP server on 127.0.0.1 answering in the ledger's error format: down
(connection refused: not listening yet), behind (``future_round`` to joins while rounds this node
signed are unsent), or up. Each test's node is a real :class:`Attester` with its journal in a
temporary state folder; a "restart" is a new Attester on the same folder.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from protocol.blobs import encode_blob
from protocol.devnet import free_port
from protocol.eip712 import Eip712Domain
from protocol.errors import LedgerUnavailableError
from protocol.keys import NodeKey
from tests.trainer.fake_ledger import LedgerHandler
from tests.trainer.nodes import DEV_KEYS, RUN_ID
from trainer.network.ledger_client import LedgerClient, RetryPolicy
from trainer.round.attest import Attester, WorkRecord
from trainer.round.journal import Journal, Pending, lost_rounds, node_of, unsent_rounds

KEY = NodeKey.from_private_key(bytes.fromhex(DEV_KEYS[1][2:]))
DOMAIN = Eip712Domain(chain_id=31337, verifying_contract=KEY.address)
CLOSED = {"error": {"code": "round_closed", "message": "round 1 closed without it"}}


class _Ledger(ThreadingHTTPServer):
    attested: list[int]  # rounds of the attestations it took, in arrival order
    joins: int
    closed: set[int]  # rounds it refuses for good (round_closed)
    needs: set[int]  # rounds whose attestations must arrive before it takes a join (behind)


class _Handler(LedgerHandler):
    server: _Ledger

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        if self.path.startswith("/v1/joins"):
            self.server.joins += 1
            if self.server.needs - set(self.server.attested):
                self._answer(422, {"error": {"code": "future_round", "message": "behind"}})
            else:
                self._answer(200, {"accepted": True})
            return
        r = int(body["attestation"]["round"])
        if r in self.server.closed:
            self._answer(409, CLOSED)
            return
        self.server.attested.append(r)
        self._answer(202, {"id": r})


@pytest.fixture
def port() -> int:
    return free_port()


def _serve(port: int) -> tuple[_Ledger, threading.Thread]:
    server = _Ledger(("127.0.0.1", port), _Handler)
    server.attested, server.joins, server.closed, server.needs = [], 0, set(), set()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


@pytest.fixture
def up(port: int) -> Iterator[_Ledger]:
    server, _ = _serve(port)
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _attester(port: int, state: Path, **kw: float) -> Attester:
    client = LedgerClient(f"http://127.0.0.1:{port}", retry=RetryPolicy(attempts=1))
    return Attester(KEY, DOMAIN, RUN_ID, client, journal=Journal(state), behind_poll_s=0.01, **kw)


def _work(r: int) -> WorkRecord:
    return WorkRecord(r, 0, bytes(32), {"w": torch.full((3,), float(r))}, bytes(32), 1, 32,
                      bytes(32), bytes(32))  # fmt: skip


def test_journal_written_before_sending_and_survives_a_restart(port: int, tmp_path: Path) -> None:
    """The ledger is down: each signed round is on disk (record and blob), survives a restart
    of the node, and goes first, in round order, once the ledger answers; then the journal is
    empty."""
    node = _attester(port, tmp_path)
    for r in (3, 4):
        assert node.publish(_work(r), [KEY.address]).ledger_id is None
    assert unsent_rounds(tmp_path) == [3, 4] and node_of(tmp_path) == KEY.address
    assert sorted(p.name for p in (tmp_path / "journal").glob("round_*")) == [
        "round_00000003.blob", "round_00000003.json", "round_00000004.blob", "round_00000004.json"
    ]  # fmt: skip
    del node  # the node dies; its journal stays
    restarted = _attester(port, tmp_path)
    assert restarted.unsent() == [3, 4]
    assert restarted.backlog[0].blob == Journal(tmp_path).pending()[0].blob
    server, _ = _serve(port)
    try:
        signed = restarted.publish(_work(5), [KEY.address])
        assert server.attested == [3, 4, 5], "the journal first, in round order"
        assert signed.ledger_id == 5
        assert unsent_rounds(tmp_path) == [] and restarted.unsent() == []
    finally:
        server.shutdown()
        server.server_close()


def test_journal_flushed_before_a_join_waits_on_a_ledger_behind(
    up: _Ledger, port: int, tmp_path: Path
) -> None:
    """The ledger is behind for want of this node's own round 5 (it answers future_round to the
    join of round 6 until it has it), which the journal holds from before a restart. The join
    sends the journal first and is taken at once; without that guard it waits out
    ``behind_wait_s`` (the issue's 450 "waiting for the ledger" lines) and round 5 is never
    sent."""
    up.needs = {5}
    Journal(tmp_path).add(_pending(5))  # signed before the node died, never acknowledged
    node = _attester(port, tmp_path, behind_wait_s=3.0)
    assert node.unsent() == [5]
    assert node.join(6) is True
    assert up.attested == [5] and up.joins == 1, "round 5 went first; the join was taken at once"
    assert unsent_rounds(tmp_path) == []


def test_journal_a_round_refused_for_good_is_recorded_as_lost(
    up: _Ledger, port: int, tmp_path: Path
) -> None:
    """A round the ledger closed without this node (after a long outage) cannot be sent again:
    it moves to the journal's lost/ with the ledger's reason, and the node goes on."""
    up.closed = {4}
    node = _attester(port, tmp_path)
    node.publish(_work(4), [KEY.address])
    assert node.publish(_work(5), [KEY.address]).ledger_id == 5
    (reason,) = lost_rounds(tmp_path).values()
    assert list(lost_rounds(tmp_path)) == [4] and "round_closed" in reason, reason
    assert node.lost == lost_rounds(tmp_path) and unsent_rounds(tmp_path) == []


def _pending(r: int) -> Pending:
    work = _work(r)
    att = Attester(KEY, DOMAIN, RUN_ID, None).attestation(work)
    return Pending(att, KEY.sign_attestation(att, DOMAIN), encode_blob(work.pseudo_gradient),
                   [str(KEY.address)], [])  # fmt: skip


def test_journal_an_outage_longer_than_the_wait_stops_the_node_naming_the_rounds(
    port: int, tmp_path: Path
) -> None:
    """A ledger that does not answer at a join: the node waits (it does not train rounds the
    ledger never hears of), then stops with the ledger's error naming its unsent rounds."""
    node = _attester(port, tmp_path, outage_wait_s=0.5)
    node.publish(_work(2), [KEY.address])
    with pytest.raises(LedgerUnavailableError, match=r"unsent rounds \[2\] stay in the journal"):
        node.join(3)
    assert unsent_rounds(tmp_path) == [2]
