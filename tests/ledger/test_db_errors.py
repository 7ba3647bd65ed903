"""Database trouble answers what it is: a race on POST /v1/runs, PostgreSQL down (503, not 500).

Against a real uvicorn server (concurrent requests really overlap) and a real PostgreSQL that
is shut down and started again under the ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from bench.harness.nodes import NodeKey, attestation, h
from ledger.core.config import Settings
from ledger.service import Ledger
from tests.ledger.conftest import ADMIN, GENESIS, serving
from tests.ledger.helpers import body


@pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_concurrent_post_runs_all_answer_the_same_run(
    settings_for: Callable[..., Settings], db_url: str
) -> None:
    """Eight admins open the same run at once: every answer is 201 with the one genesis commit
    (the settlement intent's check-then-insert raced into a UNIQUE violation: a 500)."""
    ledger = Ledger(settings_for(db_url))
    run = h("run-race")
    try:
        with serving(ledger) as url:

            def post(_: int) -> httpx.Response:
                return httpx.post(
                    f"{url}/v1/runs",
                    json={"run_id": run, "genesis_checkpoint": GENESIS},
                    headers={"Authorization": f"Bearer {ADMIN}"},
                    timeout=60,
                )

            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(post, range(8)))
    finally:
        ledger.stop()
    assert [r.status_code for r in answers] == [201] * 8, [r.text for r in answers]
    assert len({r.json()["tx_hash"] for r in answers}) == 1
    assert all(r.json()["committed"] for r in answers)


@pytest.mark.postgres
def test_postgres_down_answers_503_and_recovers(
    settings_for: Callable[..., Settings], nodes: list[NodeKey], domain: object
) -> None:
    """While PostgreSQL is down, reads and writes answer 503 database_unavailable (retry), not
    500; the URL (and its password) is in no answer; once it is back, the same requests pass
    (the writer's connection, cut by the restart, is replaced)."""
    from bench.harness.postgres import PostgresServer

    pg = PostgresServer.start()
    try:
        url = pg.create_database("db_errors").replace("@", ":s3cret-pw@", 1)
        ledger = Ledger(settings_for(url))
        run = h("run-pg-down")
        try:
            with serving(ledger) as api:
                r = httpx.post(
                    f"{api}/v1/runs",
                    json={"run_id": run, "genesis_checkpoint": GENESIS},
                    headers={"Authorization": f"Bearer {ADMIN}"},
                    timeout=60,
                )
                assert r.status_code == 201, r.text
                ledger.indexer.catch_up()
                before, post = (
                    body(
                        attestation(node, run_id=run, round_=1, base=GENESIS, result=h("r1")),
                        node.key,
                        domain,  # type: ignore[arg-type]
                    )
                    for node in nodes[:2]
                )
                # the writer keeps its connection between groups: the halt cuts it
                first = httpx.post(f"{api}/v1/attestations", json=before, timeout=30)
                assert first.status_code == 202, first.text
                reads = [f"/v1/runs/{run}/rounds", f"/v1/nodes/{nodes[0].address}"]
                pg.halt()
                try:
                    down = [httpx.get(api + p, timeout=30) for p in reads]
                    down.append(httpx.post(f"{api}/v1/attestations", json=post, timeout=30))
                finally:
                    pg.resume()
                up = [httpx.get(api + p, timeout=30) for p in reads]
                up.append(httpx.post(f"{api}/v1/attestations", json=post, timeout=30))
        finally:
            ledger.stop()
    finally:
        pg.stop()
    for r in down:
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "database_unavailable", r.text
        assert "s3cret" not in r.text and str(pg.port) not in r.text
        assert r.headers.get("retry-after")
    assert [r.status_code for r in up] == [200, 200, 202], [r.text for r in up]


@pytest.mark.postgres
def test_group_insert_skips_taken_slots_and_raises_driver_errors_as_sqlalchemy(
    postgres_url: str,
) -> None:
    """PostgreSQL groups go in with one ``INSERT .. SELECT FROM unnest .. ON CONFLICT DO
    NOTHING``: a row whose slot or digest is already stored comes back without an id (the
    caller then looks it up), the others get theirs; a driver error still surfaces as
    SQLAlchemy's (never a bare psycopg error, which the API's handlers would not recognise)
    and the transaction rolls back whole."""
    from sqlalchemy import func, insert, select
    from sqlalchemy.exc import DBAPIError

    from ledger.core import db
    from ledger.core.models import Attestation, RoundState, utcnow
    from ledger.intake.accept import Intake

    db.upgrade(postgres_url)
    engine = db.make_engine(postgres_url, threads=1)
    rows = [
        {"run_id": "0x" + "11" * 32, "round": 1, "node": f"0x{i:040x}", "config_version": 1,
         "base_checkpoint": "0x" + "33" * 32, "pseudo_gradient": "0x" + "44" * 32,
         "data_shard": "0x" + "55" * 32, "inner_steps": 5, "tokens": 100,
         "result_checkpoint": "0x" + "66" * 32, "trace_root": "0x" + "67" * 32,
         "digest": f"0x{i:064x}",
         "signature": "0x" + "77" * 65, "members": None, "received_at": utcnow()}
        for i in range(40)
    ]  # fmt: skip
    fresh = {**rows[0], "node": "0x" + "ab" * 20, "digest": "0x" + "ab" * 32}
    same_slot = {**fresh, "digest": "0x" + "cd" * 32}
    late = {**fresh, "round": 2, "node": "0x" + "cc" * 20, "digest": "0x" + "cc" * 32}
    try:
        with engine.begin() as conn:
            for rnd, state in ((1, "open"), (2, "closing")):
                conn.execute(
                    insert(RoundState.__table__).values(  # type: ignore[attr-defined]
                        run_id=late["run_id"], round=rnd, state=state, opened_at=utcnow(),
                        deadline_at=utcnow(),
                    )
                )  # fmt: skip
        with engine.begin() as conn:
            ids, states = Intake._insert(conn, rows)
        assert len({i for i in ids if i is not None}) == 40
        assert states == {(late["run_id"], 1): "open"}
        with engine.begin() as conn:
            again, states = Intake._insert(conn, [rows[0], fresh, same_slot, rows[39], late])
        assert again[0] is None and again[2] is None and again[3] is None
        assert again[1] is not None and again[1] not in ids
        # a row of a round no longer open is not inserted, whatever the caller believed
        assert again[4] is None and states[(late["run_id"], 2)] == "closing"
        too_long = {**fresh, "node": "0x" + "ef" * 20, "digest": "0x" + "ef" * 40}
        with pytest.raises(DBAPIError), engine.begin() as conn:
            Intake._insert(conn, [{**fresh, "node": "0x" + "12" * 20, "digest": "0x12"}, too_long])
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(Attestation)).scalar() == 41
    finally:
        engine.dispose()
