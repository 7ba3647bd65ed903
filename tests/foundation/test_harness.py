"""The harness itself runs the real thing: anvil, PostgreSQL, SQLite, gloo processes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
import torch
import torch.distributed as dist

from protocol.devnet import AnvilProcess, stop_pid
from tests.harness import reaper
from tests.harness.distributed import run_workers
from tests.integration.pids import alive, wait_gone


def test_anvil_snapshot_revert_undoes_state(anvil: AnvilProcess) -> None:
    w3 = anvil.w3
    sender, _ = anvil.accounts[0]
    receiver = anvil.accounts[9][0]
    before = w3.eth.get_balance(receiver)
    snap = anvil.snapshot()
    tx = w3.eth.send_transaction({"from": sender, "to": receiver, "value": 10**18})
    w3.eth.wait_for_transaction_receipt(tx)
    assert w3.eth.get_balance(receiver) == before + 10**18
    anvil.revert(snap)
    assert w3.eth.get_balance(receiver) == before


def test_chain_fixture_reverts_between_tests(chain: AnvilProcess) -> None:
    start = chain.block_number()
    chain.mine(5)
    assert chain.block_number() == start + 5


def test_anvil_accounts_are_funded_and_keys_match(anvil: AnvilProcess) -> None:
    from eth_account import Account

    assert anvil.w3.eth.chain_id == 31337
    for address, key in anvil.accounts[:3]:
        assert Account.from_key(key).address == address
        assert anvil.w3.eth.get_balance(address) > 0


def test_anvil_stops_by_pid(tmp_path) -> None:  # type: ignore[no-untyped-def]
    node = AnvilProcess.start(tmp_path)
    pid = node.pid
    node.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    stop_pid(pid)  # idempotent on a dead pid


def test_sqlite_is_a_real_file(sqlite_url: str) -> None:
    engine = sa.create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
        conn.execute(sa.text("INSERT INTO t VALUES (42)"))
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT x FROM t")).scalar_one() == 42


@pytest.mark.postgres
def test_postgres_is_a_real_server(postgres_url: str) -> None:
    engine = sa.create_engine(postgres_url)
    with engine.connect() as conn:
        version = conn.execute(sa.text("SHOW server_version")).scalar_one()
    assert version.startswith("15")


def _allreduce_rank(rank: int, world_size: int) -> list[float]:
    t = torch.tensor([float(rank + 1), 1.0])
    dist.all_reduce(t)
    return t.tolist()


@pytest.mark.distributed
def test_gloo_processes_all_reduce() -> None:
    results = run_workers(_allreduce_rank, 3)
    assert results == [[6.0, 3.0]] * 3


def _failing_rank(rank: int, world_size: int) -> None:
    if rank == 1:
        raise ValueError("rank one fails on purpose")


@pytest.mark.distributed
def test_gloo_worker_failure_is_reported() -> None:
    with pytest.raises(RuntimeError, match="rank one fails on purpose"):
        run_workers(_failing_rank, 2)


def test_a_process_orphaned_during_a_test_is_found_and_stopped(tmp_path: Path) -> None:
    """The harness's guarantee behind every test: what a test started, however deep, is stopped
    after it, here a grandchild whose parent exited (init adopted it)."""
    before = reaper.tagged()
    pid_file = tmp_path / "pid"
    subprocess.run(["bash", "-c", f"sleep 300 & echo $! > {pid_file}"], check=True)
    pid = int(pid_file.read_text())
    assert alive(pid)
    # /proc/<pid>/environ reads empty while the forked shell execs sleep, and its cmdline is
    # still the shell's until the exec, a window a loaded machine can stretch (CI missed the
    # first once after 5 s, a fresh clone read the second once): poll past both, and say what
    # was read
    deadline = time.monotonic() + 60
    while (
        pid not in {p for p, _ in reaper.tagged() - before} or not _exec_done(pid)
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid in {p for p, _ in reaper.tagged() - before}, _proc_facts(pid)
    stopped = reaper.stop_new(before)
    assert [s for s in stopped if s.startswith("sleep 300")], stopped
    assert wait_gone(pid, timeout=5)
    assert reaper.stop_new(before) == []  # nothing else of this test is left


def _exec_done(pid: int) -> bool:
    """Whether the forked shell at ``pid`` has become ``sleep`` (its cmdline says so)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep")
    except OSError:
        return False


def _proc_facts(pid: int) -> str:
    """What /proc says of `pid`, against the tag this process expects: why the scan missed it."""
    facts = [f"expected {reaper.TAG_VAR}={os.environ.get(reaper.TAG_VAR)!r}"]
    for name in ("stat", "environ", "cmdline"):
        try:
            raw = Path(f"/proc/{pid}/{name}").read_bytes()
        except OSError as exc:
            facts.append(f"{name}: {exc}")
            continue
        tags = [v for v in raw.split(b"\0") if v.startswith(reaper.TAG_VAR.encode())]
        facts.append(f"{name}: {len(raw)} bytes" + (f", tag {tags}" if name == "environ" else ""))
        if name != "environ":
            facts.append(f"  {raw[:200]!r}")
    return "; ".join(facts)
