"""Faults stay where they fall: a bad settlement, scoring error or RPC outage stops nothing else.

Each test failed before the lifecycle isolated its parts: a reverting commitRound, a corrupt
blob and an unreachable RPC each stopped every other run's rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi.testclient import TestClient
from sqlmodel import Session, select

from bench.harness.nodes import NodeKey, attestation, gradient_blob, h
from ledger.chain.client import LedgerChain
from ledger.core.config import Settings
from ledger.core.models import RoundState, Settlement
from ledger.main import create_app
from ledger.service import Ledger
from protocol.chain import RetryPolicy
from protocol.devnet import AnvilProcess
from tests.ledger.conftest import ADMIN, GENESIS
from tests.ledger.helpers import body, join, tick_until, upload_headers


def _start_run(client: TestClient, ledger: Ledger, label: str) -> str:
    run = h(label)
    r = client.post(
        "/v1/runs",
        json={"run_id": run, "genesis_checkpoint": GENESIS},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 201, r.text
    ledger.indexer.catch_up()
    return run


def _attest_alone(
    client: TestClient, run: str, node: NodeKey, domain: object, seed: int, result: str
) -> str:
    """One node joins and attests round 1 of ``run`` as its only member (the round completes as
    soon as it starts)."""
    assert join(client, node, run, 1, domain).status_code == 202  # type: ignore[arg-type]
    digest, data, _ = gradient_blob(seed)
    headers = upload_headers(node, domain, digest)  # type: ignore[arg-type]
    assert client.put(f"/v1/blobs/{digest}", content=data, headers=headers).status_code == 201
    att = attestation(
        node, run_id=run, round_=1, base=GENESIS, result=result, pseudo_gradient=digest
    )
    r = client.post("/v1/attestations", json=body(att, node.key, domain, [node.address]))  # type: ignore[arg-type]
    assert r.status_code == 202, r.text
    return digest


def _state(ledger: Ledger, run: str, round_: int) -> str | None:
    with Session(ledger.engine) as s:
        row = s.exec(
            select(RoundState).where(RoundState.run_id == run, RoundState.round == round_)
        ).first()
    return row.state if row else None


def test_a_reverting_settlement_does_not_block_a_new_run(
    client: TestClient, ledger: Ledger, nodes: list[NodeKey], domain: object
) -> None:
    bad = _start_run(client, ledger, "run-bad")
    # round 1 of the bad run commits a zero checkpoint: commitRound reverts (ZeroCheckpoint)
    with Session(ledger.engine) as s:
        s.add(
            Settlement(
                run_id=bad,
                round=1,
                rewards_root="0x" + "00" * 32,
                checkpoint="0x" + "00" * 32,
                total_work="0",
                attestations_root="0x" + "00" * 32,
                tree="[]",
            )
        )
        s.commit()
    honest = _start_run(client, ledger, "run-honest")
    _attest_alone(client, honest, nodes[0], domain, seed=1, result=h("honest-1"))
    tick_until(ledger, honest, 1, "committed")
    problems = ledger.problems()
    assert any("ZeroCheckpoint" in v or "revert" in v.lower() for v in problems.values()), problems
    ready = client.get("/v1/health/ready")
    assert ready.status_code == 503 and ready.json()["status"] == "degraded"
    assert any(bad in k for k in ready.json()["detail"]), ready.json()


def test_a_round_whose_scoring_raises_does_not_block_others(
    client: TestClient, ledger: Ledger, nodes: list[NodeKey], domain: object
) -> None:
    broken = _start_run(client, ledger, "run-corrupt")
    honest = _start_run(client, ledger, "run-fine")
    _attest_alone(client, broken, nodes[0], domain, seed=2, result=h("c-1"))
    _attest_alone(client, honest, nodes[1], domain, seed=3, result=h("f-1"))
    score = ledger.keeper.score_round

    def faulty(rnd: RoundState) -> RoundState:  # fault injection: scoring this run raises
        if rnd.run_id == broken:
            raise OSError("blob store: input/output error")
        return score(rnd)

    ledger.keeper.score_round = faulty  # type: ignore[method-assign]
    tick_until(ledger, honest, 1, "committed")
    assert _state(ledger, broken, 1) == "closing"  # waits, retried with backoff
    assert any(broken in k for k in ledger.problems()), ledger.problems()


def test_rounds_close_during_an_rpc_outage(
    settings_for: Callable[..., Settings],
    sqlite_url: str,
    chain: AnvilProcess,
    nodes: list[NodeKey],
    domain: object,
) -> None:
    settings = settings_for(sqlite_url, round_deadline_s=1.0)
    door = LedgerChain(
        settings.rpc_url,
        settings.deployment,
        settings.committer_key(),
        retry=RetryPolicy(attempts=1),
    )
    ledger = Ledger(settings, chain=door)
    try:
        with TestClient(create_app(ledger=ledger)) as client:
            run = _start_run(client, ledger, "run-outage")
            digest, data, _ = gradient_blob(5)  # a real update: the round has paid work
            headers = upload_headers(nodes[0], domain, digest)  # type: ignore[arg-type]
            assert (
                client.put(f"/v1/blobs/{digest}", content=data, headers=headers).status_code == 201
            )
            att = attestation(
                nodes[0],
                run_id=run,
                round_=1,
                base=GENESIS,
                result=h("o-1"),
                pseudo_gradient=digest,
            )
            r = client.post("/v1/attestations", json=body(att, nodes[0].key, domain))  # type: ignore[arg-type]
            assert r.status_code == 202, r.text
            door.client.w3.provider.endpoint_uri = "http://127.0.0.1:9/"  # type: ignore[attr-defined]
            time.sleep(1.1)
            ledger.tick()
            # closing needs no chain (scoring may: the funding split); indexing and settling wait
            assert _state(ledger, run, 1) in ("closing", "scored")
            assert "step index" in ledger.problems(), ledger.problems()
            door.client.w3.provider.endpoint_uri = chain.rpc_url  # type: ignore[attr-defined]
            tick_until(ledger, run, 1, "committed")
            assert "step index" not in ledger.problems()
    finally:
        ledger.stop()
