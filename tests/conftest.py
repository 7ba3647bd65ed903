"""Shared fixtures: a real anvil chain, the deployed contracts, SQLite and a real PostgreSQL.

Quick mode (COLOCO_QUICK=1, what `make test` uses in CI) skips tests marked `slow`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness import forked
from protocol.devnet import AnvilProcess
from tests.harness import reaper

QUICK = os.environ.get("COLOCO_QUICK", "0") == "1"
log = logging.getLogger(__name__)
_BEFORE_CALL = pytest.StashKey[set[tuple[int, int]]]()  # the tagged processes a test found


def pytest_configure(config: pytest.Config) -> None:
    """What this process starts carries its tag, so that a test's leftovers can be found; the
    processes the tests fork start with the node and the tests' harness imported."""
    reaper.tag_this_process()
    if hasattr(config, "workerinput"):  # an xdist worker shares the cores with the others
        import torch

        torch.set_num_threads(1)  # tests that need more threads set them, and put them back
    forked.context(
        "tests.harness.distributed", "tests.trainer.nodes", "tests.trainer.rogue",
        "bench.redteam.procs",
    )  # fmt: skip


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """Whatever the test did, no process born while it ran outlives it (fixtures' included)."""
    item.stash[_BEFORE_CALL] = reaper.tagged()
    try:
        return (yield)
    finally:
        left = reaper.stop_new(item.stash[_BEFORE_CALL])
        if left:
            log.warning("%s left %d process(es) running; stopped: %s", item.nodeid, len(left), left)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[object]:
    item.stash[_BEFORE_CALL] = reaper.tagged()  # fixtures set up: theirs are kept
    return (yield)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if session.config.pluginmanager.has_plugin("dsession"):
        return  # an xdist controller: its children are its workers, which xdist stops
    left = reaper.stop_all()
    if left:
        log.warning("the session left %d process(es) running; stopped: %s", len(left), left)


# Modules whose tests share a session fixture too costly to build twice: one xdist worker runs
# them all. Every other module is a unit of its own (its module fixtures are built once).
_SHARED_SESSION = {
    "tests/integration/test_demo.py": "the shortened demo (demo_run)",
    "tests/integration/test_dashboard.py": "the shortened demo (demo_run)",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`make test` runs the tests on every core (pytest-xdist), one module per worker at a time.

    xdist's own `--dist loadgroup` cannot group here: it renames node ids through an attribute
    pytest 9 no longer reads, so the groups are named by module in `_SHARED_SESSION` instead.
    """
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return _SHARED_SESSION.get(module, module)

    return ByModule(config, log)  # type: ignore[arg-type]


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
    with AnvilProcess.start(tmp_path_factory.mktemp("anvil")) as node:
        yield node


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
    It also takes anvil's clock back to the snapshot's block, so every test's duration would add
    to a lag behind the wall clock (738 s by the end of a loaded run, which a node's clock check
    reads as a skew): the clock is set to now again.
    """
    snap = anvil.snapshot()
    base_fee = anvil.call("eth_getBlockByNumber", ["latest", False])["baseFeePerGas"]
    try:
        yield anvil
    finally:
        anvil.revert(snap)
        anvil.call("evm_setTime", [int(time.time())])
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
