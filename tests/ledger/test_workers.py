"""Several workers on one PostgreSQL: round state guarded in SQL, one leader by advisory lock."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from bench.harness.nodes import NodeKey, attestation, h
from ledger.core.config import Settings
from ledger.service import Ledger
from protocol.toolchain import REPO_ROOT
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body

pytestmark = pytest.mark.postgres


def _env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in settings.model_dump().items():
        if value is not None:
            plain = value.get_secret_value() if hasattr(value, "get_secret_value") else value
            env[f"COLOCO_LEDGER_{key.upper()}"] = str(plain)
    return env


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_late_attestation_never_enters_a_round_another_process_closed(
    client: TestClient,
    ledger: Ledger,
    settings_for: Callable[..., Settings],
    db_url: str,
    started_run: str,
    nodes: list[NodeKey],
    domain: object,
) -> None:
    def post(node: NodeKey) -> tuple[int, dict]:
        att = attestation(node, run_id=started_run, round_=1, base=GENESIS, result=h("w"))
        r = client.post("/v1/attestations", json=body(att, node.key, domain))  # type: ignore[arg-type]
        return r.status_code, r.json()

    assert post(nodes[0])[0] == 202  # this worker has seen round 1 open
    proc = subprocess.run(
        [sys.executable, "-m", "tests.ledger.round_closer"],
        cwd=REPO_ROOT,
        env=_env(settings_for(db_url)),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.split()[-1] == b"1", proc.stderr[-2000:]
    status, out = post(nodes[1])
    assert status == 409 and out["error"]["code"] == "round_closed", out
    members = client.get(f"/v1/runs/{started_run}/rounds/1").json()["members"]
    assert members == [nodes[0].address]


def test_one_leader_among_workers(settings_for: Callable[..., Settings], postgres_url: str) -> None:
    from ledger.core import db

    db.upgrade(postgres_url)
    first, second = Ledger(settings_for(postgres_url)), Ledger(settings_for(postgres_url))
    try:
        assert first.leadership.held() is True
        assert second.leadership.held() is False
        assert first.leadership.held() is True  # it keeps it
        second.tick()
        assert not second.leading and "step follow" not in second.problems()
        first.stop()  # its connection (and the lock) goes
        assert second.leadership.held() is True
    finally:
        second.stop()


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_round_another_worker_opens_during_the_group_statement(
    client: TestClient,
    ledger: Ledger,
    started_run: str,
    nodes: list[NodeKey],
    domain: object,
) -> None:
    """A group opens its new rounds in the statement that inserts it (one commit); when another
    worker opens the same round after the statement's snapshot was taken, the statement sees
    the round neither as opened nor as locked: its rows go again, and are stored."""
    import threading
    import time
    from datetime import timedelta

    from sqlalchemy import text

    from ledger.core.models import RoundState, utcnow
    from ledger.core.schemas import AttestationIn

    table = RoundState.__table__.name  # type: ignore[attr-defined]
    att = attestation(nodes[0], run_id=started_run, round_=2, base=GENESIS, result=h("o"))
    item = AttestationIn.model_validate(body(att, nodes[0].key, domain))  # type: ignore[arg-type]
    assert ledger.round_book.state((started_run, 2)) is None  # the group will open round 2
    other = ledger.engine.connect()  # the other worker, in an open transaction
    now = utcnow()
    other.execute(
        text(
            f"INSERT INTO {table} (run_id, round, state, opened_at, deadline_at) "
            "VALUES (:run, 2, 'open', :now, :deadline)"
        ),
        {"run": started_run, "now": now, "deadline": now + timedelta(hours=1)},
    )
    outcomes: list[object] = []
    writer = threading.Thread(target=lambda: outcomes.extend(ledger.intake.submit([item])))
    writer.start()
    with ledger.engine.connect() as probe:  # wait until the statement waits for that insert
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            waiting = probe.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE '%opened AS (INSERT%'"
                )
            ).scalar()
            probe.rollback()
            if waiting:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the group statement never waited for the other worker's round")
    other.commit()
    other.close()
    writer.join(timeout=30)
    assert len(outcomes) == 1, "the write raised (see the log)"
    outcome = outcomes[0]
    assert outcome.status == 202 and outcome.id is not None, outcome  # type: ignore[attr-defined]
    r = client.get(f"/v1/runs/{started_run}/rounds/2").json()
    assert r["state"] == "open" and r["members"] == [nodes[0].address], r
