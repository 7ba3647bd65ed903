"""Ledger fixtures: a Ledger on the real anvil deployment, with SQLite or PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient

from bench.harness.nodes import NodeKey, domain_of, h, new_node
from ledger.core.config import Settings
from ledger.main import create_app
from ledger.service import Ledger
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess, free_port

ADMIN = "test-admin-token-0123456789"


@pytest.fixture(scope="session")
def deployment_file(deployment: Deployment, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ledger-dep") / "deployment.json"
    deployment.save(path)
    return path


@pytest.fixture(params=["sqlite"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture
def settings_for(
    chain: AnvilProcess, deployment_file: Path, tmp_path: Path
) -> Callable[..., Settings]:
    def make(database_url: str, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "environment": "test",
            "rpc_url": chain.rpc_url,
            "deployment": deployment_file,
            "committer_private_key": chain.accounts[1][1],
            "database_url": database_url,
            "blob_dir": tmp_path / "blobs",
            "admin_token": ADMIN,
            "run_background": False,
            "confirmations": 1,
            "round_deadline_s": 600,
            "indexer_poll_s": 0.01,
            "join_window_s": 0.5,
            "usefulness_model": None,  # fake blobs; test_usefulness and the red team score
            "audit_fraction": 0.0,  # fake blobs cannot be replayed; tests/redteam audits
        }
        values.update(overrides)
        return Settings(_env_file=None, **values)  # type: ignore[call-arg]

    return make


@contextmanager
def serving(ledger: Ledger) -> Iterator[str]:
    """``ledger`` behind a real uvicorn server on a free port, in a thread (requests really
    overlap, unlike TestClient's); yields its base URL, stops the server (not the ledger)."""
    port = free_port()
    srv = uvicorn.Server(
        uvicorn.Config(create_app(ledger=ledger), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not srv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=30)


@pytest.fixture
def ledger(settings_for: Callable[..., Settings], db_url: str) -> Iterator[Ledger]:
    service = Ledger(settings_for(db_url))
    yield service
    service.stop()


@pytest.fixture
def client(ledger: Ledger) -> Iterator[TestClient]:
    with TestClient(create_app(ledger=ledger)) as c:
        yield c


@pytest.fixture
def nodes(chain: AnvilProcess, deployment: Deployment) -> list[NodeKey]:
    """Three registered, staked nodes (operators: anvil accounts 2-4)."""
    return [
        new_node(chain.w3, deployment, chain.accounts[i][0], seed=bytes([i]) * 32)
        for i in (2, 3, 4)
    ]


@pytest.fixture
def run_id() -> str:
    return h("run-test")


GENESIS = h("genesis-checkpoint")


@pytest.fixture
def started_run(client: TestClient, ledger: Ledger, run_id: str, nodes: list[NodeKey]) -> str:
    """Genesis committed and the indexer caught up; returns the run id."""
    r = client.post(
        "/v1/runs",
        json={"run_id": run_id, "genesis_checkpoint": GENESIS},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 201, r.text
    ledger.indexer.catch_up()
    return run_id


@pytest.fixture
def domain(deployment: Deployment):  # type: ignore[no-untyped-def]
    return domain_of(deployment)
