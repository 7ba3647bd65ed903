"""A shortened `coloco demo` through the real processes, then its claims checked on chain.

The demo runs as a subprocess (`python -m coloco_cli demo`) against an anvil of its own, so that
the chain outlives it: anvil, the ledger, the rendezvous and the trainer nodes are real processes;
afterwards the test reads the chain itself and compares it with the report.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.types import RunId
from reference.settings import TrainingSettings
from tests.integration.conftest import DEMO_INNER_STEPS, DEMO_NODES, DEMO_ROUNDS
from tests.integration.pids import alive as _alive

pytestmark = [pytest.mark.integration, pytest.mark.anvil, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
NODES, ROUNDS, INNER_STEPS = DEMO_NODES, DEMO_ROUNDS, DEMO_INNER_STEPS


def test_report_has_every_required_field(demo_run: tuple[dict[str, Any], Path]) -> None:
    from coloco_cli.demo.report import REQUIRED_KEYS

    report, _ = demo_run
    assert set(REQUIRED_KEYS) <= set(report)
    assert report["checks"] and all(report["checks"].values()), report["checks"]
    assert report["rounds_committed"] == ROUNDS
    assert report["proposal_executed"] is True
    # one version a setter: the vote sets H and the wire format (--vote-wire-format sparse), so
    # the rounds after it ran the sparse format, every node credited in each
    gov = report["governance"]
    assert report["config_version_after"] == report["config_version_before"] + len(gov["change"])
    assert (gov["wire_format_before"], gov["wire_format_after"]) == ("int8", "sparse")
    assert report["config_change_seen_by_trainers"] is True
    assert isinstance(report["eval_loss_first"], float)
    assert report["eval_loss_last"] < report["eval_loss_first"]
    assert 0 < report["wall_s"] < 800
    png = Path(report["loss_curve_png"])
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(report["nodes"]) == NODES
    for node in report["nodes"]:
        assert node["rounds_credited"] == list(range(1, ROUNDS + 1)), node
        assert node["credited_exactly"] and node["balance_equals_owed"]
    # the attestations before the vote carry the old config, those after it the new one
    rounds = report["rounds"]
    assert rounds[0]["config_version"] == gov["config_version_before"]
    assert rounds[0]["inner_steps"] == INNER_STEPS
    assert rounds[-1]["config_version"] == gov["config_version_after"]
    assert rounds[-1]["inner_steps"] == gov["inner_steps_after"] != INNER_STEPS
    # the lease of node-1 (window = the run + 2 rounds): paid its rounds inside the roots, the
    # two rounds the run never reached refunded early, in one transaction each
    lease = report["lease"]
    price = int(lease["wei_per_round"])
    assert lease["node"] == report["nodes"][0]["node"]
    assert lease["window"] == [1, ROUNDS + 2] and lease["through_round"] == ROUNDS
    assert lease["rounds_completed"] == len(report["nodes"][0]["rounds_credited"])
    assert int(lease["paid_wei"]) == price * lease["rounds_completed"]
    assert int(lease["refunded_wei"]) == price * (ROUNDS + 2) - int(lease["paid_wei"])


def test_chain_state_matches_the_report(
    demo_run: tuple[dict[str, Any], Path], demo_chain: AnvilProcess
) -> None:
    anvil = demo_chain
    report, work = demo_run
    deployment = Deployment.load(work / "run" / "deployment.json")
    chain = ChainClient(anvil.rpc_url, deployment)
    run_id = RunId(bytes.fromhex(report["run_id"][2:]))
    assert chain.last_round(run_id) == ROUNDS
    config = TrainingSettings.read(chain)
    assert config.version == report["config_version_after"]
    assert config.inner_steps == report["governance"]["inner_steps_after"]
    assert config.wire_format.label == report["governance"]["wire_format_after"]
    assert chain.model_governor.state(int(report["governance"]["proposal_id"])) == 7
    supply = chain.model_share_token.total_supply()
    assert str(supply) == report["tokens_minted"]
    balances = 0
    for node in report["nodes"]:
        balance = chain.token_balance(node["payout"])
        assert str(balance) == node["owed"] == node["balance"]
        assert chain.claimed(node["payout"]) == balance
        assert chain.is_active(node["node"])
        balances += balance
    # the rest of the supply is the code and capital pools' (paid by their own contracts)
    assert balances + int(report["tokens_outside_compute"]) == supply
    # every round's committed compute budget (the compute pool) was paid out, to within dust
    compute_pool = int(chain.training_config.pool_rewards()[0])
    assert abs(balances - ROUNDS * compute_pool) <= ROUNDS * NODES


def test_keep_left_the_network_and_dashboard_up_until_ctrl_c(
    demo_run: tuple[dict[str, Any], Path],
) -> None:
    """`coloco demo --keep` printed the dashboard's URL and served it (with the run on it) until
    Ctrl-C; test_the_demo_left_no_process_behind checks that Ctrl-C then stopped everything."""
    report, work = demo_run
    keep = json.loads((work / "keep.json").read_text())
    assert keep["page_status"] == 200
    assert f'data-run="{report["run_id"].lower()}"' in keep["page"]
    assert keep["health"]["database"] == "ok"
    output = (work / "demo-output.txt").read_text()
    assert "stopping the network" in output
    # the story is told in public commands, each printed as typed
    for line in ("$ coloco ledger serve", "$ coloco rendezvous serve", "$ coloco run open",
                 "$ coloco node register", "$ coloco node stake", "$ coloco node run",
                 "$ coloco rewards claim", "$ coloco gov propose", "$ coloco gov vote",
                 "$ coloco gov execute"):  # fmt: skip
        assert line in output, line
    assert "--private-key $PAYOUT_KEY_1" in output
    events = sorted((work / "run" / "events").glob("*.jsonl"))  # what the nodes reported
    assert len(events) == len(report["nodes"]) and all(p.read_text().strip() for p in events)


def test_the_demo_left_no_process_behind(demo_run: tuple[dict[str, Any], Path]) -> None:
    _, work = demo_run
    started = json.loads((work / "run" / "processes.json").read_text())
    names = {p["name"] for p in started}
    assert {"ledger", "rendezvous", "node-1", "node-2"} <= names
    alive = [p for p in started if _alive(p["pid"])]
    assert alive == [], f"still running after the demo: {alive}"
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
    assert [line for line in out.stdout.splitlines() if str(work / "run") in line] == []


def test_rewards_cli_reads_the_restarted_ledger(
    demo_run: tuple[dict[str, Any], Path],
    demo_chain: AnvilProcess,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The demo's ledger, restarted on its SQLite file, serves what `coloco rewards` shows."""
    from typer.testing import CliRunner

    from coloco_cli.common import fmt_units
    from coloco_cli.demo.net import start_ledger
    from coloco_cli.main import app
    from coloco_cli.procs import ProcessManager
    from protocol.errors import ConfigError

    report, work = demo_run
    anvil = demo_chain
    run_dir = work / "run"
    with ProcessManager(handle_signals=False) as procs:
        url, _ = start_ledger(
            procs, run_dir, anvil, run_dir / "deployment.json", round_deadline_s=90
        )
        monkeypatch.setenv("COLOCO_RPC_URL", anvil.rpc_url)
        monkeypatch.setenv("COLOCO_LEDGER_URL", url)
        monkeypatch.setenv("COLOCO_DEPLOYMENT", str(run_dir / "deployment.json"))
        monkeypatch.delenv("COLOCO_CONFIG", raising=False)
        runner = CliRunner()
        node = report["nodes"][0]
        shown = runner.invoke(app, ["rewards", "show", node["payout"]])
        assert shown.exit_code == 0, shown.exception
        text = " ".join(shown.output.split())
        assert f"owed (cumulative) │ {fmt_units(int(node['owed']))} CMS" in text, shown.output
        assert "claimable now │ 0 CMS" in text
        for r in range(1, ROUNDS + 1):  # one receipt per round
            assert re.search(rf"│ {r} │ 0x\w+… │ \d+ │ \d+ │ [\d.]+ │ [\d.]+ CMS │", text), text
            assert re.search(rf"round {r}, 0x\w{{6}}…: \S", text), text  # and its reason

        again = runner.invoke(
            app,
            [
                "rewards",
                "claim",
                node["payout"],
                "--private-key",
                anvil.accounts[9][1],
            ],
        )
        assert isinstance(again.exception, ConfigError)
        assert "already claimed all" in again.exception.message
        status = runner.invoke(app, ["node", "status", "--node", node["node"]])
        assert status.exit_code == 0, status.exception
        assert f"rounds worked │ {ROUNDS}" in " ".join(status.output.split())
