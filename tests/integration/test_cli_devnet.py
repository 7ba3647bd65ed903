"""`coloco devnet up | status | deploy | down` against a real anvil, in a scratch directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coloco_cli.common import DEFAULT_RPC_URL, resolve
from coloco_cli.devnet.state import DEVNET_DIR, PID_FILE, STATE_FILE, devnet_rpc_url
from coloco_cli.main import app
from coloco_cli.procs import port_open
from protocol.chain import ChainClient
from protocol.deployment import CONTRACT_NAMES, Deployment
from protocol.devnet import free_port
from protocol.errors import ChainError, ConfigError
from tests.integration.pids import alive

pytestmark = pytest.mark.integration

runner = CliRunner()


def test_devnet_lifecycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    port = free_port()
    result = runner.invoke(app, ["devnet", "up", "--port", str(port)])
    assert result.exit_code == 0, result.output
    state = json.loads(Path(".coloco/devnet/devnet.json").read_text())
    pid = state["pid"]
    try:
        assert state["rpc_url"] == f"http://127.0.0.1:{port}"
        assert alive(pid) and port_open("127.0.0.1", port)

        again = runner.invoke(app, ["devnet", "up", "--port", str(port)])
        assert isinstance(again.exception, ConfigError)
        assert "coloco devnet down" in again.exception.message

        status = runner.invoke(app, ["devnet", "status"])
        assert status.exit_code == 0 and "up" in status.output and "deploy" in status.output

        deployed = runner.invoke(app, ["devnet", "deploy"])
        assert deployed.exit_code == 0, deployed.output
        dep = Deployment.load(".coloco/devnet/deployment.json")
        assert set(CONTRACT_NAMES) <= set(dep.contracts)
        assert dep.chain_id == 31337
        accounts = json.loads(Path(".coloco/devnet/anvil-accounts.json").read_text())
        assert dep.committer.lower() == accounts["available_accounts"][1].lower()
        # devnet defaults: every kind of contributor can earn (backers and code included)
        viewer = ChainClient(state["rpc_url"], dep)
        assert viewer.training_config.ownership_split() == (7000, 1000, 2000)  # compute,code,cap
        deployer = accounts["available_accounts"][0]
        assert _committee(viewer, deployer) and "code committee (`code approve`): 0x" in " ".join(
            deployed.output.split()
        )
        # the options: another split, a named account as the committee
        monkeypatch.setenv("COLOCO_HOME", str(tmp_path / "home"))
        made = runner.invoke(app, ["keys", "new", "--name", "reviewer", "--light-kdf"],
                             env={"COLOCO_PASSWORD": "pw"})  # fmt: skip
        assert made.exit_code == 0, made.output
        reviewer = runner.invoke(app, ["keys", "show", "reviewer", "--field", "address"])
        other = runner.invoke(app, ["devnet", "deploy", "--out", "other.json", "--json",
                                    "--ownership-split", "code=500,compute=9000,capital=500",
                                    "--code-committee", "reviewer"])  # fmt: skip
        assert other.exit_code == 0, other.output
        assert json.loads(other.stdout)["code_committee"] == [reviewer.stdout.strip()]
        second = ChainClient(state["rpc_url"], Deployment.load("other.json"))
        assert second.training_config.ownership_split() == (9000, 500, 500)
        assert _committee(second, reviewer.stdout.strip()) and not _committee(second, deployer)

        # --json on every devnet command that reports something: one object on stdout
        st = json.loads(runner.invoke(app, ["devnet", "status", "--json"]).stdout)
        assert st["rpc_url"] == state["rpc_url"] and st["pid"] == pid and st["deployment"]
        mined = json.loads(runner.invoke(app, ["devnet", "mine", "2", "--json"]).stdout)
        assert mined == {"mined": 2, "head": st["block"] + 2}
        addr = json.loads(runner.invoke(app, ["devnet", "address", "1", "--json"]).stdout)
        assert addr["address"].lower() == accounts["available_accounts"][1].lower()
        key = json.loads(runner.invoke(app, ["devnet", "key", "1", "--json"]).stdout)
        assert key["private_key"] == accounts["private_keys"][1]
    finally:
        down = runner.invoke(app, ["devnet", "down"])
    assert down.exit_code == 0, down.output
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)
    assert not port_open("127.0.0.1", port)
    assert not Path(".coloco/devnet/anvil.pid").exists()
    assert "not running" in runner.invoke(app, ["devnet", "down"]).output
    down_status = runner.invoke(app, ["devnet", "status"])
    assert isinstance(down_status.exception, ChainError)
    assert "coloco devnet up" in down_status.exception.message


def _committee(chain: ChainClient, who: str) -> bool:
    from eth_utils.address import to_checksum_address

    registry = chain.contract("CodeRegistry").functions
    role = registry.COMMITTEE_ROLE().call()
    return bool(registry.hasRole(role, to_checksum_address(who)).call())


@pytest.mark.parametrize(
    ("split", "said"),
    [
        ("compute=7000,capital=2000,code=2000", "sum to exactly 10000"),
        ("compute=7000,capital=3000", "lacks code"),
        ("compute=7000,capital=2000,cpu=1000", "name each part once"),
        ("compute=7000,capital=x,code=1000", "whole number"),
    ],
)
def test_deploy_refuses_a_bad_ownership_split_before_any_chain(
    split: str, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["devnet", "deploy", "--ownership-split", split])
    text = " ".join(result.output.replace("│", " ").split())  # rich's error box, unwrapped
    assert result.exit_code == 2 and said in text, result.output


def test_devnet_up_refuses_a_busy_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    monkeypatch.chdir(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = runner.invoke(app, ["devnet", "up", "--port", str(port)])
    assert isinstance(result.exception, ConfigError)
    assert f"port {port}" in result.exception.message and "--port" in result.exception.message
    assert not Path(".coloco/devnet/anvil.pid").exists()


def test_deploy_without_a_devnet_says_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["devnet", "deploy"])
    assert isinstance(result.exception, ConfigError)
    assert "coloco devnet up" in result.exception.message


def test_every_command_and_the_devnet_group_agree_whether_a_devnet_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`coloco devnet up` recorded a URL, then its anvil died without `coloco devnet down`.
    There used to be two `devnet_rpc_url`: every other command's default RPC (`resolve`) kept
    the dead devnet's URL while `coloco devnet status` said the devnet was down. Now both read
    one (coloco_cli/devnet/state.py): no devnet, so the documented default; while the pid lives,
    both take the recorded URL."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COLOCO_RPC_URL", raising=False)
    monkeypatch.setenv("COLOCO_CONFIG", str(tmp_path / "coloco.toml"))
    (tmp_path / "coloco.toml").write_text("")  # no config file's rpc_url in the way
    recorded = f"http://127.0.0.1:{free_port()}"
    DEVNET_DIR.mkdir(parents=True)
    STATE_FILE.write_text(json.dumps({"rpc_url": recorded, "port": 1, "chain_id": 31337}))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])  # a pid that no longer runs
    gone.wait()
    PID_FILE.write_text(str(gone.pid))

    assert devnet_rpc_url() is None
    assert resolve().rpc_url == DEFAULT_RPC_URL  # was `recorded`: a chain nobody runs
    down = runner.invoke(app, ["devnet", "status"])
    assert isinstance(down.exception, ChainError) and "devnet is down" in down.exception.message

    PID_FILE.write_text(str(os.getpid()))  # a live pid: the devnet counts as up
    STATE_FILE.write_text(json.dumps({"rpc_url": recorded, "port": 1, "chain_id": 31337}))
    assert devnet_rpc_url() == recorded and resolve().rpc_url == recorded
    STATE_FILE.write_text("{not json")  # an unreadable record: no devnet URL, no traceback
    assert devnet_rpc_url() is None and resolve().rpc_url == DEFAULT_RPC_URL
