"""Several workers on one PostgreSQL: round state guarded in SQL, one leader by advisory lock."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from ledger.core.config import Settings
from ledger.service import Ledger
from protocol.toolchain import REPO_ROOT
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import NodeKey, attestation, body, h

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
    from ledger import db

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
