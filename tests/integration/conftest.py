"""Fixtures for CLI tests: the deployment JSON on disk and token holders with real claims."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from typer.testing import CliRunner

from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.merkle import RewardsTree
from protocol.types import Address, Bytes32, RoundNumber, RunId
from reference.settings import TrainingSettings


def cli_ok(*args: str) -> str:
    """Run ``coloco ARGS`` in this process; assert it exits 0 and return its output on one line
    (whitespace collapsed, so a wrapped table cell reads as written)."""
    from coloco_cli.main import app

    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, f"{args}: {result.exception!r}\n{result.output}"
    return " ".join(result.output.split())


@pytest.fixture
def cli_env(
    chain: AnvilProcess, deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """COLOCO_RPC_URL / COLOCO_DEPLOYMENT point at the test chain; cwd is a scratch folder."""
    path = tmp_path / "deployment.json"
    deployment.save(path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLOCO_RPC_URL", chain.rpc_url)
    monkeypatch.setenv("COLOCO_DEPLOYMENT", str(path))
    monkeypatch.setenv("COLOCO_LEDGER_URL", "http://127.0.0.1:9")  # nothing listens there
    for var in ("COLOCO_CONFIG", "COLOCO_PRIVATE_KEY", "COLOCO_KEYSTORE"):
        monkeypatch.delenv(var, raising=False)
    yield path


@dataclass(frozen=True)
class Holder:
    address: str
    key: str
    amount: int


@pytest.fixture
def holders(chain: AnvilProcess, deployment: Deployment) -> list[Holder]:
    """Two fresh accounts that claimed ModelShareTokens through a real committed rewards root.

    The committer (anvil account 1) commits rounds carrying a budget of rewardPerRound each (ten
    rounds cover the 1,000 CMS), the last one under the root that pays 600 and 400 CMS (each
    round's root is new: a repeated root may carry no new budget); after the root's dispute
    window each holder claims with its proof, which mints and auto-delegates; a second passes so
    the votes count (timestamp clock).
    """
    amounts = [600 * 10**18, 400 * 10**18]
    accounts = [Account.create() for _ in amounts]
    for acct in accounts:
        chain.call("anvil_setBalance", [acct.address, hex(10**19)])
    tree = RewardsTree.build(
        (Address(acct.address), amount) for acct, amount in zip(accounts, amounts, strict=True)
    )
    committer = ChainClient(chain.rpc_url, deployment, Account.from_key(chain.accounts[1][1]))
    run_id = RunId(os.urandom(32))
    per_round = TrainingSettings.read(committer).reward_per_round
    rounds = -(-sum(amounts) // per_round)
    for round_ in range(rounds):
        committer.commit_round(
            run_id,
            RoundNumber(round_),
            rewards_root=tree.root if round_ == rounds - 1 else Bytes32(os.urandom(32)),
            checkpoint_hash=Bytes32(os.urandom(32)),
            total_work=1,
            attestations_root=Bytes32(b"\x00" * 32),
            reward_total=per_round,
        )
    chain.increase_time(committer.dispute_window())
    for acct, amount in zip(accounts, amounts, strict=True):
        client = ChainClient(chain.rpc_url, deployment, Account.from_key(acct.key))
        client.claim(Address(acct.address), amount, tree.proof(Address(acct.address)))
    chain.increase_time(1)
    return [
        Holder(str(acct.address), "0x" + bytes(acct.key).hex(), amount)
        for acct, amount in zip(accounts, amounts, strict=True)
    ]


# --- one shortened `coloco demo` per session, shared by test_demo.py and test_dashboard.py ------

REPO = Path(__file__).resolve().parents[2]
# 5 rounds, and the vote switches the wire format to sparse too (--vote-wire-format), so rounds
# 2-5 run the sparse format end to end; no churn, so every node works every round
DEMO_NODES, DEMO_ROUNDS, DEMO_INNER_STEPS = 2, 5, 8


@pytest.fixture
def ledger_answer() -> Iterator[tuple[str, dict[str, Any]]]:
    """A small real HTTP server that answers every GET with the JSON the test puts in ``answer``
    (a ledger's rewards or funding proof for an account, with a root the test commits on chain);
    yields (its URL, ``answer``)."""
    answer: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answer
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def demo_chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilProcess]:
    """An anvil of the demo's own: the demo deploys, mines and moves time on it freely."""
    with AnvilProcess.start(tmp_path_factory.mktemp("demo-anvil")) as node:
        yield node


@pytest.fixture(scope="session")
def demo_run(
    demo_chain: AnvilProcess, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], Path]:
    """The demo with `--keep`: once it prints the dashboard's URL, the dashboard is read (kept in
    `keep.json` for test_demo.py), then Ctrl-C (SIGINT) ends it as a person would."""
    anvil = demo_chain
    work = tmp_path_factory.mktemp("demo")
    report = work / "report" / "demo.json"
    cmd = [
        sys.executable, "-m", "coloco_cli", "demo", "--keep",
        "--nodes", str(DEMO_NODES), "--rounds", str(DEMO_ROUNDS), "--no-churn",
        "--vote-wire-format", "sparse",
        "--inner-steps", str(DEMO_INNER_STEPS),
        "--report", str(report), "--workdir", str(work / "run"),
        "--rpc-url", anvil.rpc_url, "--accounts", str(anvil.workdir / "anvil-accounts.json"),
    ]  # fmt: skip
    out_path = work / "demo-output.txt"
    with out_path.open("w") as out_file:
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=out_file, text=True,
            env={**os.environ, "COLUMNS": "160"},
        )  # fmt: skip
        keep = _read_until_dashboard(proc, out_file)
        if keep is not None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C: the demo stops what it started
        try:
            rest, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
        out_file.write(rest or "")
    (work / "keep.json").write_text(json.dumps(keep))
    logs = work / "run" / "logs"
    output = out_path.read_text()
    assert keep is not None and proc.returncode == 0, (
        f"demo failed ({proc.returncode}):\n{output[-6000:]}\n"
        + "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(logs.glob("*.log")))
    )
    return json.loads(report.read_text()), work


def _read_until_dashboard(proc: subprocess.Popen[str], out: Any) -> dict[str, Any] | None:
    """Copy the demo's stdout until its `dashboard: URL` line; then read the kept dashboard."""
    import httpx

    assert proc.stdout is not None
    deadline = time.monotonic() + 800
    for line in proc.stdout:
        out.write(line)
        found = re.search(r"dashboard: (http://\S+)", line)
        if found:
            url = found.group(1).rstrip("/")
            page = httpx.get(url + "/", timeout=30)
            health = httpx.get(url + "/v1/health", timeout=30)
            return {"url": url, "page_status": page.status_code, "page": page.text[:20000],
                    "health": health.json()}  # fmt: skip
        if time.monotonic() > deadline:
            return None
    return None
