"""The node's journal: signed attestations on disk until the ledger acknowledged them.

The ledger here is a real HTTP server on 127.0.0.1 answering in the ledger's error format: down
(connection refused: not listening yet), behind (``future_round`` to joins while rounds this node
signed are unsent), or up. Each test's node is a real :class:`Attester` with its journal in a
temporary state folder; a "restart" is a new Attester on the same folder.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch

from protocol.blobs import encode_blob
from protocol.devnet import free_port
from protocol.eip712 import Eip712Domain
from protocol.errors import AttestationRejected, LedgerUnavailableError
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
    refused: set[int]  # rounds whose attestations it refuses as invalid (no retry helps)
    gate: threading.Event | None  # attestations wait for it before they are answered


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
        if self.server.gate is not None:
            self.server.gate.wait(30)
        if r in self.server.closed:
            self._answer(409, CLOSED)
            return
        if r in self.server.refused:
            self._answer(422, {"error": {"code": "bad_signature", "message": "not its key"}})
            return
        self.server.attested.append(r)
        self._answer(202, {"id": r})


@pytest.fixture
def port() -> int:
    return free_port()


def _serve(port: int) -> tuple[_Ledger, threading.Thread]:
    server = _Ledger(("127.0.0.1", port), _Handler)
    server.attested, server.joins, server.closed, server.needs = [], 0, set(), set()
    server.refused, server.gate = set(), None
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


def _attester(port: int, state: Path, **kw: Any) -> Attester:
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


def _until(done: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.01)


def test_journal_a_background_attester_returns_before_the_ledger_answers(
    up: _Ledger, port: int, tmp_path: Path
) -> None:
    """``background`` (the node's default, `coloco node run`): publish returns while the ledger
    has not answered (the inner steps do not wait for the upload), with the round already in
    the journal on disk; the sender delivers it, in round order, and the journal empties."""
    up.gate = threading.Event()
    node = _attester(port, tmp_path, background=True)
    for r in (7, 8):
        assert node.publish(_work(r), [KEY.address]).ledger_id is None
    assert unsent_rounds(tmp_path) == [7, 8] and up.attested == []  # held at the ledger
    up.gate.set()
    # the sender forgets a round on disk and records its ack under one lock the test does not
    # take: wait for both, or the disk can be read empty between the two
    _until(lambda: unsent_rounds(tmp_path) == [] and len(node.acknowledged) == 2,
           "the sender delivered rounds 7 and 8")  # fmt: skip
    assert up.attested == [7, 8] and node.acknowledged == {7: 7, 8: 8} and node.unsent() == []
    node.close()


def test_journal_a_refusal_the_sender_meets_is_raised_on_the_nodes_thread(
    up: _Ledger, port: int, tmp_path: Path
) -> None:
    """An attestation the ledger refuses for a reason no retry changes, met by the sender
    thread, is not swallowed: the node's next publish raises it (as a synchronous publish would
    have), and so does its next join's flush; the round stays in the journal."""
    up.refused = {3}
    node = _attester(port, tmp_path, background=True)
    node.publish(_work(3), [KEY.address])
    _until(lambda: node._sender is not None and not node._sender.is_alive(), "the sender stopped")
    with pytest.raises(AttestationRejected, match="bad_signature"):
        node.publish(_work(4), [KEY.address])
    with pytest.raises(AttestationRejected, match="bad_signature"):
        node.join(5)
    assert unsent_rounds(tmp_path) == [3] and up.attested == []


def test_journal_a_publish_does_not_wait_for_a_send_in_flight(
    up: _Ledger, port: int, tmp_path: Path
) -> None:
    """The sender holds round 7's submit open at the ledger; round 8's publish still returns at
    once, journaled (the backlog is not held across a request)."""
    up.gate = threading.Event()
    node = _attester(port, tmp_path, background=True)
    node.publish(_work(7), [KEY.address])
    _until(node._sending.locked, "the sender is inside round 7's submit")
    returned = threading.Event()
    threading.Thread(target=lambda: (node.publish(_work(8), [KEY.address]), returned.set()),
                     daemon=True).start()  # fmt: skip
    assert returned.wait(10), "round 8's publish waited for round 7's request"
    assert unsent_rounds(tmp_path) == [7, 8] and up.attested == []
    up.gate.set()
    _until(lambda: unsent_rounds(tmp_path) == [], "both delivered")
    assert up.attested == [7, 8]
    node.close()
