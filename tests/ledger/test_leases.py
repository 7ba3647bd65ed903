"""Leases paid inside the round's settlement, on a real anvil with a real ledger process.

Two leases of one round each: node 0 works the round, node 1 does not. The ledger process is
killed (SIGKILL) right after sending the round's commit; the restarted ledger commits it once,
with the lease leaves folded into the rewards root. Then each lease is paid exactly: node 0 its
round (a second claim pays nothing), node 1 nothing, and one refund per lease returns exactly
the unearned escrow: 0 unpaid and 0 double-paid rounds, and the contract holds nothing after.
No transaction per round is sent for the leases: the settlement sends the one commitRound.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, select
from typer.testing import CliRunner
from web3 import Web3

from bench.harness.nodes import contract
from coloco_cli.main import app
from coloco_cli.watch.ops import Scores, check_rewards_roots
from ledger.core.config import Settings
from ledger.core.models import Settlement
from ledger.service import Ledger
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.errors import ConfigError
from protocol.toolchain import REPO_ROOT
from tests.ledger.conftest import serving
from tests.ledger.helpers import tick_until
from tests.ledger.test_settlement import _commit_events, _scored_round

pytestmark = pytest.mark.anvil

PRICE = 10**15
NOTHING_TO_CLAIM = Web3.keccak(text="NothingToClaim(bytes32,uint256,uint256)")[:4].hex()


runner = CliRunner()


def _cli(env: Path, *args: str) -> Any:
    """`coloco market lease ARGS --json`: its one JSON line."""
    result = runner.invoke(app, ["market", "lease", *args, "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.output.strip().splitlines()[-1])


@pytest.fixture
def cli_env(
    chain: AnvilProcess, deployment_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The CLI pointed at the test chain and deployment, from a scratch folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLOCO_RPC_URL", chain.rpc_url)
    monkeypatch.setenv("COLOCO_DEPLOYMENT", str(deployment_file))
    for var in ("COLOCO_CONFIG", "COLOCO_PRIVATE_KEY", "COLOCO_KEYSTORE", "COLOCO_LEDGER_URL"):
        monkeypatch.delenv(var, raising=False)
    return deployment_file


def _open(env: Path, run_id: str, node: str, key: str) -> str:
    """Opens a one-round lease of ``node`` in ``run_id`` with the CLI; returns its id."""
    out = _cli(env, "open", run_id, node, "--price-per-round", f"{PRICE}wei", "--rounds", "1",
               "--private-key", key)  # fmt: skip
    assert out["escrow_wei"] == str(PRICE) and out["start_round"] == out["end_round"] == 1
    return str(out["lease_id"])


def _sigkill_after_send(settings: Settings) -> None:
    """A real ledger process ticks the settler and hangs right after sending the commit; it is
    killed with SIGKILL there (nothing after the send was recorded)."""
    env = dict(os.environ)
    for key, value in settings.model_dump().items():
        if value is not None:
            plain = value.get_secret_value() if hasattr(value, "get_secret_value") else value
            env[f"COLOCO_LEDGER_{key.upper()}"] = str(plain)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.ledger.crash_worker", "hang:sent"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.strip() == "AT sent", line
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_lease_paid_in_the_round_root_exactly_after_a_kill9(
    client: Any,
    ledger: Ledger,
    settings_for: Callable[..., Settings],
    db_url: str,
    started_run: str,
    nodes: list[Any],
    domain: Any,
    chain: AnvilProcess,
    deployment: Deployment,
    cli_env: Path,
) -> None:
    organiser, organiser_key = chain.accounts[7]
    leases = contract(chain.w3, deployment, "ComputeLeases")
    # A dispute window the test's own steps cannot outlast under load (the devnet's is 2 s; the
    # ledger reads a root as finalized once the wall clock passes it): set by its admin, the
    # Timelock, as a vote would; the chain fixture reverts it.
    cl = contract(chain.w3, deployment, "ContributionLedger")
    chain.transact_as(deployment.address("TimelockController"), cl, "setDisputeWindow", 600)
    worked = _open(cli_env, started_run, nodes[0].address, organiser_key)
    idle = _open(cli_env, started_run, nodes[1].address, organiser_key)
    chain.mine(2)  # past the indexer's confirmation depth
    ledger.indexer.catch_up()
    _scored_round(client, ledger, started_run, nodes, domain)  # node 0 works round 1
    with Session(ledger.engine) as s:
        row = s.exec(select(Settlement).where(Settlement.round == 1)).one()
    assert row.leases is not None
    assert sorted(json.loads(row.leases)) == sorted([[worked, str(PRICE), 1], [idle, "0", 1]])
    committer = ledger.chain.client.account_address
    nonce_before = chain.w3.eth.get_transaction_count(committer)

    settings = settings_for(db_url)
    _sigkill_after_send(settings)
    restarted = Ledger(settings)
    restarted.start(background=False)
    try:
        tick_until(restarted, started_run, 1, "committed")
        assert _commit_events(chain, deployment, started_run, 1) == 1
        # one transaction for the round, whatever the number of leases
        assert chain.w3.eth.get_transaction_count(committer) == nonce_before + 1
        info = cl.functions.rootInfo(bytes.fromhex(row.rewards_root[2:])).call()
        assert info[0] > 0  # the intent's root, lease leaves folded in, is the one committed
        ledger.indexer.catch_up()
        with serving(ledger) as url:  # in its dispute window: refused, saying from when
            early = runner.invoke(app, ["market", "lease", "claim", worked, "--ledger-url", url,
                                        "--private-key", chain.accounts[8][1]])  # fmt: skip
        assert isinstance(early.exception, ConfigError), early.output
        assert "is pending: claim from" in str(early.exception)
        chain.increase_time(int(cl.functions.disputeWindow().call()) + 1)
        chain.mine(2)
        restarted.indexer.catch_up()
    finally:
        restarted.stop()

    ledger.indexer.catch_up()
    # anyone rebuilds the committed root from public data, the lease leaves included
    assert check_rewards_roots(ledger.chain.client, Scores(client)) == []
    payer_key = chain.accounts[8][1]  # anyone may send claims and refunds
    before = chain.w3.eth.get_balance(nodes[0].address)
    org_before = chain.w3.eth.get_balance(organiser)
    with serving(ledger) as url:
        st = _cli(cli_env, "status", worked, "--ledger-url", url)
        assert st["leaf"]["cumulative_wei"] == str(PRICE) and st["leaf"]["ended"] is True
        assert st["leaf"]["root"] == row.rewards_root and st["leaf"]["root_state"] == "finalized"
        assert st["paid_wei"] == "0" and st["settled"] is False
        paid = _cli(cli_env, "claim", worked, "--ledger-url", url, "--private-key", payer_key)
        assert paid["paid_wei"] == str(PRICE)
        again = _cli(cli_env, "claim", worked, "--ledger-url", url, "--private-key", payer_key)
        assert again["paid_wei"] == "0"  # nothing new: no transaction
        leaf = st["leaf"]
        args = (
            bytes.fromhex(worked[2:]),
            int(leaf["cumulative_wei"]),
            leaf["through_round"],
            bytes.fromhex(leaf["root"][2:]),
            [bytes.fromhex(p[2:]) for p in leaf["proof"]],
        )
        with pytest.raises(Exception, match=NOTHING_TO_CLAIM):  # the contract refuses too
            leases.functions.claim(*args).call({"from": organiser})
        for lease_id, back in ((worked, 0), (idle, PRICE)):
            out = _cli(cli_env, "refund", lease_id, "--ledger-url", url, "--private-key", payer_key)
            assert out["refunded_wei"] == str(back)
        shown = runner.invoke(app, ["market", "lease", "status", idle, "--ledger-url", url])
        text = " ".join(shown.output.split())
        assert "(settled)" in text and "escrow 0.001 ETH" in text and "wei" not in text, text
    assert chain.w3.eth.get_balance(nodes[0].address) - before == PRICE  # its one round, once
    assert chain.w3.eth.get_balance(organiser) - org_before == PRICE  # node 1's unused escrow
    assert chain.w3.eth.get_balance(leases.address) == 0
    missing = client.get("/v1/leases/0x" + "ab" * 32)
    assert missing.status_code == 404 and "no lease" in missing.text
