"""Times are instants: a PostgreSQL database in America/New_York keeps a 600 s round open.

With the first schema's naive columns this round reported ``opened_at`` five hours in the past
and closed "deadline passed" a moment after it opened.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, inspect, text

from bench.harness.nodes import NodeKey, attestation, h
from ledger.core.config import Settings
from ledger.core.models import utcnow
from ledger.main import create_app
from ledger.service import Ledger
from tests.ledger.conftest import ADMIN, GENESIS
from tests.ledger.helpers import body


@pytest.mark.postgres
def test_a_round_stays_open_on_a_new_york_database(
    postgres_url: str, settings_for: Callable[..., Settings], nodes: list[NodeKey], domain: object
) -> None:
    name = postgres_url.rsplit("/", 1)[1]
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"ALTER DATABASE \"{name}\" SET timezone TO 'America/New_York'"))
    admin.dispose()
    ledger = Ledger(settings_for(postgres_url, round_deadline_s=600))
    try:
        with TestClient(create_app(ledger=ledger)) as client:
            with ledger.engine.connect() as conn:
                assert conn.execute(text("SHOW timezone")).scalar() == "America/New_York"
            types = {
                c["name"]: c["type"] for c in inspect(ledger.engine).get_columns("ledger_round")
            }
            assert getattr(types["deadline_at"], "timezone", False) is True
            run = h("run-new-york")
            r = client.post(
                "/v1/runs",
                json={"run_id": run, "genesis_checkpoint": GENESIS},
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            assert r.status_code == 201, r.text
            ledger.indexer.catch_up()
            att = attestation(nodes[0], run_id=run, round_=1, base=GENESIS, result=h("ny"))
            r = client.post("/v1/attestations", json=body(att, nodes[0].key, domain))  # type: ignore[arg-type]
            assert r.status_code == 202, r.text
            ledger.tick()
            rnd = client.get(f"/v1/runs/{run}/rounds/1").json()
            assert rnd["state"] == "open", rnd
            opened = datetime.fromisoformat(rnd["opened_at"])
            deadline = datetime.fromisoformat(rnd["deadline_at"])
            assert abs((utcnow() - opened).total_seconds()) < 60, rnd
            assert (deadline - opened).total_seconds() == pytest.approx(600, abs=1)
    finally:
        ledger.stop()
