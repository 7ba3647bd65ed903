"""Settlement survives crashes between sending commitRound and recording it: one commit, no skip."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlmodel import Session, select

from bench.harness.nodes import attestation, contract, gradient_blob, h
from ledger.core.config import Settings
from ledger.core.models import RoundState, Settlement, utcnow
from ledger.service import Ledger
from protocol.toolchain import REPO_ROOT
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body, join, tick_until, upload_headers


class Crash(BaseException):
    """A simulated process death: not an error the settler may catch and retry."""


def _scored_round(client, ledger: Ledger, run_id: str, nodes, domain) -> None:
    assert join(client, nodes[0], run_id, 1, domain).status_code == 202
    digest, data, _ = gradient_blob(7)
    signed = upload_headers(nodes[0], domain, digest)
    assert client.put(f"/v1/blobs/{digest}", content=data, headers=signed).status_code == 201
    att = attestation(
        nodes[0], run_id=run_id, round_=1, base=GENESIS, result=h("res"), pseudo_gradient=digest
    )
    r = client.post("/v1/attestations", json=body(att, nodes[0].key, domain, [nodes[0].address]))
    assert r.status_code == 202
    ledger.keeper.close_due(now=utcnow() + timedelta(seconds=2))  # after the join window
    (rnd,) = ledger.keeper.score_ready()
    ledger.settler.record_intent(rnd)


def _commit_events(chain, deployment, run_id: str, round_: int) -> int:
    cl = contract(chain.w3, deployment, "ContributionLedger")
    logs = cl.events.RoundCommitted().get_logs(from_block=0)
    return sum(
        1
        for e in logs
        if "0x" + e["args"]["runId"].hex() == run_id and e["args"]["round"] == round_
    )


def _status(ledger: Ledger) -> str:
    with Session(ledger.engine) as s:
        return s.exec(select(Settlement).where(Settlement.round == 1)).one().status


@pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
@pytest.mark.parametrize("point", ["signed", "sent"])
def test_crash_in_process_then_resume(
    point, client, ledger, settings_for, db_url, started_run, nodes, domain, chain, deployment
) -> None:
    _scored_round(client, ledger, started_run, nodes, domain)

    def crash(where: str) -> None:
        if where == point:
            raise Crash(where)

    ledger.settler.fault_hook = crash
    with pytest.raises(Crash):
        ledger.settler.tick()
    assert _status(ledger) == "signed"  # the hash was recorded before sending
    expected_on_chain = 1 if point == "sent" else 0
    if point == "sent":  # anvil answers the send before it mines the block (seen under load)
        with Session(ledger.engine) as s:
            sent = s.exec(select(Settlement).where(Settlement.round == 1)).one().tx_hash
        chain.w3.eth.wait_for_transaction_receipt(sent, timeout=30)
    assert _commit_events(chain, deployment, started_run, 1) == expected_on_chain

    ledger.leadership.release()  # the crashed process's connection, with its leader lock, is gone
    restarted = Ledger(settings_for(db_url))  # a fresh process' view: same database and chain
    restarted.start(background=False)
    tick_until(restarted, started_run, 1, "committed")
    assert _status(restarted) == "mined"
    assert _commit_events(chain, deployment, started_run, 1) == 1
    with Session(restarted.engine) as s:
        rnd = s.exec(select(RoundState).where(RoundState.round == 1)).one()
    assert rnd.state in ("committed", "final") and rnd.tx_hash
    restarted.stop()


def test_killed_process_after_send_commits_once(
    client,
    ledger,
    settings_for: Callable[..., Settings],
    db_url,
    started_run,
    nodes,
    domain,
    chain,
    deployment,
) -> None:
    _scored_round(client, ledger, started_run, nodes, domain)
    settings = settings_for(db_url)
    env = dict(os.environ)
    for key, value in settings.model_dump().items():
        if value is not None:
            plain = value.get_secret_value() if hasattr(value, "get_secret_value") else value
            env[f"COLOCO_LEDGER_{key.upper()}"] = str(plain)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.ledger.crash_worker", "sent"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 17, proc.stderr.decode()[-2000:]
    assert _status(ledger) == "signed"
    assert _commit_events(chain, deployment, started_run, 1) == 1

    restarted = Ledger(settings)
    restarted.start(background=False)
    tick_until(restarted, started_run, 1, "committed")
    assert _status(restarted) == "mined"
    assert _commit_events(chain, deployment, started_run, 1) == 1
    restarted.stop()


def test_already_committed_round_is_adopted(
    client, ledger, started_run, nodes, domain, chain, deployment
) -> None:
    """Someone (an earlier life of this ledger) committed it: adopt, do not resend."""
    _scored_round(client, ledger, started_run, nodes, domain)
    with Session(ledger.engine) as s:
        row = s.exec(select(Settlement).where(Settlement.round == 1)).one()
    cl = contract(chain.w3, deployment, "ContributionLedger")
    tx = cl.functions.commitRound(
        bytes.fromhex(started_run[2:]),
        1,
        bytes.fromhex(row.rewards_root[2:]),
        bytes.fromhex(row.checkpoint[2:]),
        int(row.total_work),
        bytes.fromhex(row.attestations_root[2:]),
        0,
    ).transact({"from": chain.accounts[1][0]})
    chain.w3.eth.wait_for_transaction_receipt(tx)
    ledger.settler.tick()
    assert _status(ledger) == "mined"
    assert _commit_events(chain, deployment, started_run, 1) == 1
