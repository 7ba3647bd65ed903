"""`coloco` starts quickly because each command imports only what it runs (coloco_cli.lazy).

The figures are bench.cli's (`python -m bench.cli`); these tests guard the cause: the modules a
command imports, read from `python -X importtime` of a real `coloco` process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess

pytestmark = [pytest.mark.integration]

# what `coloco --version` has no use for (the CLI framework, typer, is all it needs)
HEAVY = {"torch", "numpy", "web3", "eth_account", "eth_abi", "eth_utils", "pydantic", "fastapi",
         "uvicorn", "sqlalchemy", "sqlmodel", "httpx", "rich", "trainer", "ledger"}  # fmt: skip
# what `coloco rewards show` (an HTTP request and two contract views) has no use for
NOT_FOR_READS = {"torch", "numpy", "web3", "eth_account", "eth_abi", "fastapi", "uvicorn",
                 "sqlalchemy", "sqlmodel", "trainer", "ledger"}  # fmt: skip


def imported(*args: str, cwd: Path) -> tuple[set[str], str]:
    """The top-level packages a `coloco ARGS` process imported, and its stdout (exit 0)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLOCO_")}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "coloco_cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    names = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "coloco_cli" in names  # the output is importtime's
    return names, done.stdout


def test_startup_version_imports_no_heavy_package(tmp_path: Path) -> None:
    names, out = imported("--version", cwd=tmp_path)
    assert out.startswith("coloco ")
    assert not names & HEAVY, sorted(names & HEAVY)


@pytest.mark.anvil
def test_startup_rewards_show_reads_without_web3_or_torch(
    chain: AnvilProcess,
    deployment: Deployment,
    ledger_answer: tuple[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    """The whole command runs (the ledger's answer over HTTP, two views on the real chain)."""
    url, answer = ledger_answer
    account = chain.accounts[2][0]
    answer.update({"account": account, "cumulative_amount": "5", "proof": [], "root": None,
                   "receipts": [], "root_state": "unknown"})  # fmt: skip
    dep = tmp_path / "deployment.json"
    deployment.save(dep)
    names, out = imported(
        "rewards", "show", account, "--json", "--rpc-url", chain.rpc_url, "--ledger-url", url,
        "--deployment", str(dep), cwd=tmp_path,
    )  # fmt: skip
    shown = json.loads(out.strip().splitlines()[-1])
    assert (shown["owed"], shown["claimed"], shown["balance"]) == (5, 0, 0), shown
    assert not names & NOT_FOR_READS, sorted(names & NOT_FOR_READS)
