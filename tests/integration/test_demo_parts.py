"""The demo's parts that need no chain: its plan, log parsing, TrainingConfig changes, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coloco_cli.demo.plan import DemoPlan
from coloco_cli.demo.report import REQUIRED_KEYS, write_report
from coloco_cli.gov.changes import config_as_dict, parse_sets, setter_calls
from protocol.deployment import abi
from protocol.errors import ColocoError, ConfigError


def test_node_records_come_from_its_events_file(tmp_path: Path) -> None:
    """The demo reads what `node run --events` wrote (JSON lines), never the node's log."""
    from coloco_cli.demo.train import NodeProc

    events = tmp_path / "node.jsonl"
    rec = {"event": "round_done", "round": 3, "eval_loss": 2.5}
    lines = [json.dumps(rec), json.dumps({**rec, "round": 4}), json.dumps({**rec, "round": 5})]
    events.write_text("\n".join(lines) + '\n{"event": "round_done", "rou')  # a partial line
    node = NodeProc(actor=None, child=None, last_round=5, leave_after=None, events=events)  # type: ignore[arg-type]
    assert node.rounds_worked() == [3, 4, 5]
    missing = NodeProc(None, None, 5, None, tmp_path / "none.jsonl")  # type: ignore[arg-type]
    assert missing.records() == []


def test_shell_prints_each_command_and_hides_secrets(tmp_path: Path) -> None:
    """The demo's commands are public `coloco` commands, each printed as `$ coloco ...`."""
    from coloco_cli.demo.shell import Secret, Shell

    said: list[str] = []
    shell = Shell(said.append, tmp_path / "commands.log")
    made = shell.json(
        "keys", "new", "--out", tmp_path / "k.json", "--password-file", _password(tmp_path),
        "--light-kdf", "--payout", "0x" + "ab" * 20,
    )  # fmt: skip
    assert made["address"].startswith("0x") and made["payout"].lower() == "0x" + "ab" * 20
    assert said[-1].startswith("$ coloco keys new --out ") and said[-1].endswith(" --json")
    secret = Secret("0x" + "11" * 32, "OPERATOR_KEY_1")
    argv = shell.argv("node", "stake", "--node", "0x" + "22" * 20, "--private-key", secret)
    assert said[-1].endswith("--private-key $OPERATOR_KEY_1") and "11" * 32 not in said[-1]
    assert argv[-1] == secret.value and argv[1:3] == ["-m", "coloco_cli"]
    with pytest.raises(ColocoError):  # a command's error reaches the demo as the same error
        shell.run("keys", "new", "--out", tmp_path / "k.json", "--password-file",
                  _password(tmp_path), "--light-kdf")  # fmt: skip
    assert "$ coloco keys new" in (tmp_path / "commands.log").read_text()


def _password(folder: Path) -> Path:
    path = folder / "pw"
    path.write_text("demo-password")
    return path


def test_plan_validates_and_schedules() -> None:
    plan = DemoPlan.make(nodes=3, rounds=6, inner_steps=20)
    assert (plan.govern_after, plan.join_after, plan.leave_after) == (1, 2, 4)
    assert (plan.new_inner_steps, plan.new_wire_format) == (30, None)  # the vote sets H alone
    voted = DemoPlan.make(nodes=3, rounds=5, inner_steps=20, wire_format="sparse")
    assert voted.new_wire_format == "sparse" and "wire format -> sparse" in voted.describe()
    with pytest.raises(ConfigError, match="at least 5 rounds"):  # too short for its loss to fall
        DemoPlan.make(nodes=3, rounds=4, inner_steps=20, wire_format="sparse")
    with pytest.raises(ConfigError, match="choose one of"):
        DemoPlan.make(nodes=3, rounds=6, inner_steps=20, wire_format="zip")
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
        "innerSteps": 50, "innerLrE6": 1000, "traceInterval": 5, "outerLrE6": 700_000,
        "outerMomentumE6": 900_000,
        "wireFormat": 2, "maxNodes": 64, "minStake": 10**18, "rewardPerRound": 10**20,
        "dataMixtureBps": [10_000], "dataRoot": b"\2" * 32, "releasedCheckpoint": b"\0" * 32,
        "releasedCheckpointURI": "",
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
    release = setter_calls(
        config_abi, current, {"releasedCheckpoint": b"\1" * 32, "releasedCheckpointURI": "u"}
    )
    assert [(c.function, c.args) for c in release] == [("releaseCheckpoint", (b"\1" * 32, "u"))]
    with pytest.raises(ConfigError, match="released-checkpoint-uri"):
        setter_calls(config_abi, current, {"releasedCheckpoint": b"\1" * 32})
    pin = parse_sets(["data-root=0x" + "03" * 32])  # the run's data, by its manifest root
    assert pin == {"dataRoot": b"\3" * 32}
    assert [(c.function, c.args) for c in setter_calls(config_abi, current, pin)] == [
        ("setDataRoot", (b"\3" * 32,))
    ]


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
    events = tmp_path / "early.jsonl"
    with ProcessManager(handle_signals=False) as procs:
        early = procs.start(
            "node-1",
            ["bash", "-c", f"echo '{record}' > {events}; echo 'error (ledger_error): boom'"],
            tmp_path / "early.log",
        )
        early.popen.wait(timeout=10)
        with pytest.raises(TrainerError, match=r"before its last round \(3\)") as info:
            check_nodes([NodeProc(actor, early, last_round=3, leave_after=None, events=events)])
        assert "boom" in info.value.message
        # the same node leaving after round 1 did exactly what it should
        check_nodes([NodeProc(actor, early, last_round=3, leave_after=1, events=events)])
        failed = procs.start("node-2", ["bash", "-c", "exit 5"], tmp_path / "failed.log")
        failed.popen.wait(timeout=10)
        with pytest.raises(TrainerError, match="exited with code 5"):
            check_nodes([NodeProc(actor, failed, 3, None, tmp_path / "none.jsonl")])


def test_wait_for_round_waits_for_the_ledger_to_record_the_commit(tmp_path: Path) -> None:
    """The chain shows a round committed a moment before the ledger has read the receipt; a claim
    sent in between is answered from the previous root (CI: 0 claims, the demo's vote Defeated).
    The wait ends only when a real HTTP ledger answers the round as committed."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from coloco_cli.demo.net import DemoNet
    from coloco_cli.demo.train import wait_for_round

    run_id = bytes(range(32))
    state = {"value": "scored"}

    class Ledger(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            known = self.path == f"/v1/runs/0x{run_id.hex()}/rounds/1"
            body = json.dumps({"state": state["value"]}).encode()
            self.send_response(200 if known else 404)
            self.end_headers()
            self.wfile.write(body if known else b"{}")

        def log_message(self, *args: object) -> None:
            pass

    class Chain:  # the chain's view: round 1 already committed
        def last_round(self, run: object) -> int:
            return 1

    class Alive:
        def alive(self) -> bool:
            return True

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ledger)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        net = DemoNet.__new__(DemoNet)
        net.ledger_url = f"http://127.0.0.1:{server.server_address[1]}"
        net.chain = Chain  # type: ignore[method-assign,assignment]
        net.ledger = Alive()  # type: ignore[assignment]
        net.workdir = tmp_path
        with pytest.raises(ColocoError, match="round 1 was not committed"):
            wait_for_round(net, run_id, 1, [], timeout=1.0)
        state["value"] = "committed"
        assert wait_for_round(net, run_id, 1, [], timeout=5.0) == 1
    finally:
        server.shutdown()
