"""Membership set by the protocol: signed joins before the round starts; nobody closes a round
early alone or shuts another member out."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from bench.harness.nodes import NodeKey, attestation, h
from ledger.core.models import utcnow
from ledger.service import Ledger
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body, join


def _state(client: TestClient, run: str, round_: int) -> str:
    return str(client.get(f"/v1/runs/{run}/rounds/{round_}").json()["state"])


def test_a_lone_member_cannot_close_the_round_nor_can_a_late_joiner_enter(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey], domain: object
) -> None:
    a, b, c = nodes
    for node in (a, b):
        assert join(client, node, started_run, 1, domain).status_code == 202  # type: ignore[arg-type]
    # c is not a member: its attestation is refused, whatever members it declares
    att_c = attestation(c, run_id=started_run, round_=1, base=GENESIS, result=h("r"))
    r = client.post("/v1/attestations", json=body(att_c, c.key, domain, [c.address]))  # type: ignore[arg-type]
    assert r.status_code == 403 and r.json()["error"]["code"] == "not_a_member"
    # a alone, declaring itself the only member, does not close the round (b joined)
    att_a = attestation(a, run_id=started_run, round_=1, base=GENESIS, result=h("r"))
    assert (
        client.post("/v1/attestations", json=body(att_a, a.key, domain, [a.address])).status_code
        == 202
    )  # type: ignore[arg-type]
    later = utcnow() + timedelta(seconds=5)
    ledger.keeper.close_due(now=later)
    assert _state(client, started_run, 1) == "open"
    # once the round started, a join is refused: the members are fixed
    time.sleep(ledger.settings.join_window_s + 0.1)
    r = join(client, c, started_run, 1, domain)  # type: ignore[arg-type]
    assert r.status_code == 409 and r.json()["error"]["code"] == "round_started"
    fixed = client.get(f"/v1/runs/{started_run}/rounds/1/members").json()
    assert fixed["started"] is True and fixed["members"] == sorted([a.address, b.address])
    # b attests: every member did, the round closes before its deadline
    att_b = attestation(b, run_id=started_run, round_=1, base=GENESIS, result=h("r"))
    members = [a.address, b.address]
    assert (
        client.post("/v1/attestations", json=body(att_b, b.key, domain, members)).status_code == 202
    )  # type: ignore[arg-type]
    ledger.keeper.close_due(now=later)
    assert _state(client, started_run, 1) == "closing"


def test_joining_ahead_does_not_start_a_round(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey], domain: object
) -> None:
    a, b, _ = nodes
    # a joins round 2 while round 1 is not committed: round 2 has not started, b may still join
    assert join(client, a, started_run, 2, domain).status_code == 202  # type: ignore[arg-type]
    ledger.keeper.close_due(now=utcnow() + timedelta(seconds=60))
    assert join(client, b, started_run, 2, domain).status_code == 202  # type: ignore[arg-type]
    members = client.get(f"/v1/runs/{started_run}/rounds/2/members").json()
    assert members["members"] == sorted([a.address, b.address]) and members["starts_at"] is None
    assert members["started"] is False  # trainers wait for more joins while it is False


def test_a_fresh_read_keeps_a_join_recorded_while_it_read(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey], domain: object
) -> None:
    """Two joins at once: one thread's fresh read of the joins (before b's commit) must not drop
    b's join, recorded meanwhile, from the cache that GET members and the round's start read
    (it did: the round started without b, whose join had been accepted)."""
    a, b, _ = nodes
    assert join(client, a, started_run, 1, domain).status_code == 202  # type: ignore[arg-type]
    # b's thread recorded its join (cache) after this read of the database began (a only)
    ledger.membership._cache[(started_run, 1)][b.address] = utcnow()
    ledger.membership.joined(started_run, 1, fresh=True)
    got = client.get(f"/v1/runs/{started_run}/rounds/1/members").json()["members"]
    assert got == sorted([a.address, b.address])


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
def test_joins_another_worker_recorded_are_read_from_the_database(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey], domain: object
) -> None:
    """The joins of a group's rounds (intake) and of the keeper's dirty rounds come from one
    query (on PostgreSQL two array parameters): with this process's cache empty, as in a worker
    that did not record them, a non-member is still refused and the members are found."""
    a, b, c = nodes
    for node in (a, b):
        assert join(client, node, started_run, 1, domain).status_code == 202  # type: ignore[arg-type]
    membership = ledger.membership
    assert membership is not None
    membership._cache.clear()  # recorded by "another worker": only the database knows them
    att_c = attestation(c, run_id=started_run, round_=1, base=GENESIS, result=h("r"))
    r = client.post("/v1/attestations", json=body(att_c, c.key, domain, [c.address]))  # type: ignore[arg-type]
    assert r.status_code == 403 and r.json()["error"]["code"] == "not_a_member"
    att_a = attestation(a, run_id=started_run, round_=1, base=GENESIS, result=h("r"))
    r = client.post("/v1/attestations", json=body(att_a, a.key, domain, [a.address]))  # type: ignore[arg-type]
    assert r.status_code == 202
    membership._cache.clear()
    found = membership.refresh([(started_run, 1), (started_run, 2)])
    assert sorted(found[(started_run, 1)]) == sorted([a.address, b.address])
    assert found[(started_run, 2)] == {}


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
def test_a_member_that_never_attests_cannot_join_the_next_rounds(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey], domain: object
) -> None:
    """F12: a registered node joined every round and never attested (a sybil that never came to
    the rendezvous): with half the members such no-shows, no round could close before its
    deadline (600 s by default), round after round. A member that did not attest a round that
    closed now loses the join right for NO_SHOW_ROUNDS rounds per such round, so sybils hold
    at most the rounds they had joined before their first no-show was known."""
    from ledger.intake.membership import NO_SHOW_ROUNDS

    a, b, c = nodes
    for node in (a, b, c):
        assert join(client, node, started_run, 1, domain).status_code == 202  # type: ignore[arg-type]
    time.sleep(ledger.settings.join_window_s + 0.1)  # round 1 started: its members are fixed
    members = [a.address, b.address]  # the rendezvous's list: c never came
    for node in (a, b):
        att = attestation(node, run_id=started_run, round_=1, base=GENESIS, result=h("r"))
        r = client.post("/v1/attestations", json=body(att, node.key, domain, members))  # type: ignore[arg-type]
        assert r.status_code == 202, r.text
    assert client.get(f"/v1/nodes/{c.address}").json()["missed_rounds"] == []  # still open
    ledger.keeper.close_due(now=utcnow() + timedelta(seconds=5))
    assert _state(client, started_run, 1) == "closing"
    # the missed round is on the node's record (the API and its dashboard page), not on a's
    missed = client.get(f"/v1/nodes/{c.address}").json()["missed_rounds"]
    assert missed == [{"run_id": started_run, "round": 1}]
    assert client.get(f"/v1/nodes/{a.address}").json()["missed_rounds"] == []
    page = client.get(f"/nodes/{c.address}")
    assert page.status_code == 200 and "Missed rounds" in page.text, page.text[-2000:]
    assert "Missed rounds" not in client.get(f"/nodes/{a.address}").text
    r = join(client, c, started_run, 2, domain)  # type: ignore[arg-type]
    assert r.status_code == 403 and r.json()["error"]["code"] == "no_show", r.text
    assert "round 1" in r.json()["error"]["message"]
    assert f"round {1 + NO_SHOW_ROUNDS + 1}" in r.json()["error"]["message"]
    for node in (a, b):  # the members that attested join on
        assert join(client, node, started_run, 2, domain).status_code == 202  # type: ignore[arg-type]
