"""The demo's parts that need no chain: its plan, log parsing, TrainingConfig changes, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coloco_cli.demo.plan import DemoPlan
from coloco_cli.demo.report import REQUIRED_KEYS, write_report
from coloco_cli.demo.train import parse_round_records
from coloco_cli.gov.changes import config_as_dict, setter_calls
from protocol.deployment import abi
from protocol.errors import ConfigError


def test_round_records_are_found_in_every_log_form(tmp_path: Path) -> None:
    rec = {"event": "round_done", "round": 3, "eval_loss": 2.5}
    log = tmp_path / "node.log"
    log.write_text(
        "\n".join(
            [
                f"2026-01-01 INFO trainer.cli: {rec!r}",  # a dict repr (--plain)
                "2026-01-01 INFO trainer.progress: " + json.dumps({**rec, "round": 4}),
                json.dumps({"level": "info", "msg": json.dumps({**rec, "round": 5})}),
                "noise round_done {not a dict",
                json.dumps({"event": "round_started", "round": 6}),
            ]
        )
    )
    assert [r["round"] for r in parse_round_records(log)] == [3, 4, 5]
    assert parse_round_records(tmp_path / "missing.log") == []


def test_plan_validates_and_schedules() -> None:
    plan = DemoPlan.make(nodes=3, rounds=6, inner_steps=20)
    assert (plan.govern_after, plan.join_after, plan.leave_after) == (1, 2, 4)
    assert plan.new_inner_steps == 30
    short = DemoPlan.make(nodes=2, rounds=3, inner_steps=8)
    assert short.join_after is None and short.leave_after is None  # too short for churn
    assert DemoPlan.make(nodes=1, rounds=6, inner_steps=8).leave_after is None
    with pytest.raises(ConfigError, match="at least 3"):
        DemoPlan.make(nodes=2, rounds=2, inner_steps=8)
    with pytest.raises(ConfigError, match="--nodes 9"):
        DemoPlan.make(nodes=9, rounds=6, inner_steps=8)
    with pytest.raises(ConfigError, match="--inner-steps 1"):
        DemoPlan.make(nodes=2, rounds=6, inner_steps=1)


def test_setter_calls_keep_the_other_fields_of_a_group() -> None:
    config_abi = abi("TrainingConfig")
    current = {
        "innerSteps": 50, "innerLrE6": 1000, "outerLrE6": 700_000, "outerMomentumE6": 900_000,
        "wireFormat": 2, "maxNodes": 64, "minStake": 10**18, "rewardPerRound": 10**20,
        "dataMixtureBps": [10_000], "releasedCheckpoint": b"\0" * 32, "releasedCheckpointURI": "",
    }  # fmt: skip
    calls = setter_calls(config_abi, current, {"innerSteps": 30, "outerMomentumE6": 500_000})
    assert {(c.function, c.args) for c in calls} == {
        ("setInnerLoop", (30, 1000)),
        ("setOuterOptimizer", (700_000, 500_000)),
    }
    assert setter_calls(config_abi, current, {"minStake": 5})[0].args == (5,)
    values = [current[k] for k in current]
    assert config_as_dict(config_abi, values) == current
    with pytest.raises(ConfigError, match="no setter for version"):
        setter_calls(config_abi, current, {"version": 3})


def test_report_needs_every_key_and_writes_a_png(tmp_path: Path) -> None:
    report = {key: None for key in REQUIRED_KEYS}
    report["rounds"] = [
        {"round": 1, "eval_loss": 3.5, "config_version": 2},
        {"round": 2, "eval_loss": 3.0, "config_version": 3, "joined": "node-4 joined"},
    ]
    png = write_report(report, tmp_path / "out" / "demo.json")
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "out" / "demo.json").read_text())["loss_curve_png"] == str(png)
    del report["wall_s"]
    with pytest.raises(ValueError, match="wall_s"):
        write_report(report, tmp_path / "again.json")


def test_a_node_that_stops_early_is_reported_even_with_exit_code_0(tmp_path: Path) -> None:
    from coloco_cli.demo.actors import Actor
    from coloco_cli.demo.train import NodeProc, check_nodes
    from coloco_cli.procs import ProcessManager
    from protocol.errors import TrainerError

    actor = Actor("node-1", "0x0", "0x0", "0x0", tmp_path / "k", tmp_path / "p", "0x0", "0x0")
    record = json.dumps({"event": "round_done", "round": 1})
    with ProcessManager(handle_signals=False) as procs:
        early = procs.start(
            "node-1", ["bash", "-c", f"echo '{record}'; echo 'error (ledger_error): boom'"],
            tmp_path / "early.log",
        )  # fmt: skip
        early.popen.wait(timeout=10)
        with pytest.raises(TrainerError, match=r"before its last round \(3\)") as info:
            check_nodes([NodeProc(actor, early, last_round=3, leave_after=None)])
        assert "boom" in info.value.message
        # the same node leaving after round 1 did exactly what it should
        check_nodes([NodeProc(actor, early, last_round=3, leave_after=1)])
        failed = procs.start("node-2", ["bash", "-c", "exit 5"], tmp_path / "failed.log")
        failed.popen.wait(timeout=10)
        with pytest.raises(TrainerError, match="exited with code 5"):
            check_nodes([NodeProc(actor, failed, last_round=3, leave_after=None)])
