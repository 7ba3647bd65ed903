"""Closing a run (`POST /v1/runs/{run}/close`, admin): rounds in flight finish, no later round
starts (attestations and joins refused with `run_closed`), and the closure survives a restart."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from bench.harness.nodes import NodeKey, attestation, h
from ledger.core.config import Settings
from ledger.service import Ledger
from tests.ledger.conftest import ADMIN, GENESIS
from tests.ledger.helpers import body, join

AUTH = {"Authorization": f"Bearer {ADMIN}"}


def _attest(client: TestClient, node: NodeKey, run: str, round_: int, domain) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    att = attestation(node, run_id=run, round_=round_, base=GENESIS, result=h(f"r{round_}"))
    r = client.post("/v1/attestations", json=body(att, node.key, domain))
    return r.status_code, r.json().get("error", {}).get("code", "")


def test_close_stops_later_rounds_and_survives_a_restart(
    client: TestClient,
    ledger: Ledger,
    started_run: str,
    nodes: list[NodeKey],
    domain,  # type: ignore[no-untyped-def]
    settings_for: Callable[..., Settings],
    db_url: str,
) -> None:
    run = started_run
    assert _attest(client, nodes[0], run, 1, domain)[0] == 202  # round 1 is in flight
    assert client.get(f"/v1/runs/{run}").json()["closed"] is False
    # the guard: only the admin closes a run
    for headers in ({}, {"Authorization": "Bearer wrong-token"}):
        r = client.post(f"/v1/runs/{run}/close", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    r = client.post(f"/v1/runs/{run}/close", headers=AUTH, json={"final_round": 0})
    assert r.status_code == 200, r.text
    # the rounds the ledger already has finish: the final round is at least the highest seen
    info = r.json()
    assert info == {
        "run_id": run,
        "genesis_checkpoint": GENESIS,
        "last_committed": 0,
        "closed": True,
        "final_round": 1,
    }
    assert _attest(client, nodes[1], run, 1, domain)[0] == 202  # in flight: still taken
    assert _attest(client, nodes[2], run, 2, domain) == (409, "run_closed")
    j = join(client, nodes[2], run, 2, domain)
    assert j.status_code == 409 and j.json()["error"]["code"] == "run_closed"
    # idempotent: a second close keeps the first final round
    again = client.post(f"/v1/runs/{run}/close", headers=AUTH, json={"final_round": 9})
    assert again.status_code == 200 and again.json()["final_round"] == 1
    assert client.get(f"/v1/runs/{run}").json() == info
    # a restarted ledger (or a follower) reads the closure from the database
    other = Ledger(settings_for(db_url))
    try:
        other.closures.load()
        assert other.closures.final == {run: 1}
    finally:
        other.stop()


def test_close_refuses_an_unknown_run(client: TestClient, started_run: str) -> None:
    unknown = h("never-opened")
    r = client.post(f"/v1/runs/{unknown}/close", headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_run"
    assert client.get(f"/v1/runs/{unknown}").status_code == 404
    bad = client.post(f"/v1/runs/{started_run}/close", headers=AUTH, json={"final_round": -1})
    assert bad.status_code == 422
