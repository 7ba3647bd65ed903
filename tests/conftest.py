"""Shared fixtures: a real anvil chain, the deployed contracts, SQLite and a real PostgreSQL.

Quick mode (COLOCO_QUICK=1, what `make test` uses in CI) skips tests marked `slow`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.devnet import AnvilProcess

QUICK = os.environ.get("COLOCO_QUICK", "0") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not QUICK:
        return
    skip = pytest.mark.skip(reason="slow: skipped in quick mode (COLOCO_QUICK=1); `make test-full`")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def anvil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilProcess]:
    """A real anvil on a free 127.0.0.1 port for the whole session, stopped by its pid."""
    node = AnvilProcess.start(tmp_path_factory.mktemp("anvil"))
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def deployment(anvil: AnvilProcess, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Every contract deployed once on the session's anvil (deployer = account 0, committer = 1)."""
    from protocol.deploy import deploy

    deployer_key = anvil.accounts[0][1]
    committer = anvil.accounts[1][0]
    out = tmp_path_factory.mktemp("deployment") / "deployment.json"
    return deploy(anvil.rpc_url, deployer_key, committer=committer, out_path=out)


@pytest.fixture
def chain(anvil: AnvilProcess) -> Iterator[AnvilProcess]:
    """The session's anvil, snapshotted before the test and reverted after it.

    A revert restores state but not a base-fee override or automine setting a test left behind
    (fee-bumping tests raise the base fee): both are put back so later tests' fee caps still fit.
    """
    snap = anvil.snapshot()
    base_fee = anvil.call("eth_getBlockByNumber", ["latest", False])["baseFeePerGas"]
    try:
        yield anvil
    finally:
        anvil.revert(snap)
        anvil.call("evm_setAutomine", [True])
        anvil.call("anvil_setNextBlockBaseFeePerGas", [base_fee])


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite database file (a real file, not :memory:)."""
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    from bench.harness.postgres import PostgresServer

    server = PostgresServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: object, request: pytest.FixtureRequest) -> str:
    """A fresh database on the session's real PostgreSQL server."""
    from bench.harness.postgres import PostgresServer

    assert isinstance(postgres_server, PostgresServer)
    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:50]
    return postgres_server.create_database(name)
