"""`coloco node register | stake | unstake | withdraw | status` against the real anvil."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from eth_account import Account
from typer.testing import CliRunner

from coloco_cli.main import app
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.errors import ConfigError, ContractRevertError
from protocol.types import Address

pytestmark = [pytest.mark.integration, pytest.mark.anvil]

runner = CliRunner()


def _invoke(*args: str) -> tuple[int, str, BaseException | None]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output, result.exception


def test_register_stake_status_unstake_withdraw(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment
) -> None:
    operator_key = chain.accounts[3][1]
    node_account = Account.create()
    node = node_account.address
    node_key = "0x" + bytes(node_account.key).hex()
    payout = Account.create().address
    viewer = ChainClient(chain.rpc_url, deployment)

    code, out, exc = _invoke("node", "status", "--node", node)
    assert code == 0, exc
    assert "coloco node register" in out

    code, _, exc = _invoke("node", "stake", "--node", node, "--private-key", operator_key)
    assert isinstance(exc, ConfigError)
    assert f"node {node} is not registered: run coloco node register" in exc.message

    code, _, exc = _invoke(
        "node", "register", "--node", node, "--payout", payout, "--private-key", operator_key
    )
    assert isinstance(exc, ConfigError) and "proof of possession" in exc.message
    wrong = "0x" + bytes(Account.create().key).hex()
    code, _, exc = _invoke(
        "node", "register", "--node", node, "--node-private-key", wrong, "--payout", payout,
        "--private-key", operator_key,
    )  # fmt: skip
    assert isinstance(exc, ConfigError) and "is not the address of the node key" in exc.message
    code, out, exc = _invoke(
        "node", "register", "--node", node, "--node-private-key", node_key, "--payout", payout,
        "--private-key", operator_key,
    )  # fmt: skip
    assert code == 0, exc
    info = viewer.node_info(Address(node))
    assert info.operator == chain.accounts[3][0] and info.payout == payout

    code, _, exc = _invoke(
        "node", "stake", "--node", node, "--amount", "0.5", "--private-key", operator_key
    )
    assert isinstance(exc, ContractRevertError)
    assert exc.error_name == "StakeBelowMinimum" and "raise --amount" in exc.message
    assert not viewer.is_active(Address(node))

    code, out, exc = _invoke("node", "stake", "--node", node, "--private-key", operator_key)
    assert code == 0, exc
    assert viewer.node_info(Address(node)).staked == 10**18
    assert viewer.is_active(Address(node))

    code, out, exc = _invoke("node", "status", "--node", node)
    assert code == 0 and "yes" in out and "1 ETH" in out
    node_id = viewer.stake_manager.node_id_of(node)
    assert node_id > 0 and re.search(rf"node id\s*│\s*{node_id}\s", out), out
    result = runner.invoke(app, ["node", "status", "--node", node, "--json"])
    st = json.loads(result.stdout)
    assert st["node_id"] == node_id and st["retired"] is False and st["staked"] == str(10**18)

    code, _, exc = _invoke(
        "node", "unstake", "--node", node, "--amount", "2", "--private-key", operator_key
    )
    assert isinstance(exc, ConfigError) and "it has 1 ETH staked" in exc.message

    code, out, exc = _invoke(
        "node", "unstake", "--node", node, "--amount", "0.25", "--private-key", operator_key
    )
    assert code == 0, exc
    info = viewer.node_info(Address(node))
    assert info.staked == 75 * 10**16 and info.unbonding == 25 * 10**16

    code, _, exc = _invoke("node", "withdraw", "--node", node, "--private-key", operator_key)
    assert isinstance(exc, ConfigError) and "withdraw again after that" in exc.message

    chain.increase_time(info.unbonding_ready_at - chain.w3.eth.get_block("latest")["timestamp"] + 1)
    operator = chain.accounts[3][0]
    before = chain.w3.eth.get_balance(operator)
    code, out, exc = _invoke("node", "withdraw", "--node", node, "--private-key", operator_key)
    assert code == 0, exc
    assert viewer.node_info(Address(node)).unbonding == 0
    gained = chain.w3.eth.get_balance(operator) - before
    assert 24 * 10**16 < gained <= 25 * 10**16  # minus gas


def test_only_the_operator_may_unstake(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment
) -> None:
    node_account, payout = Account.create(), Account.create().address
    node, node_key = node_account.address, "0x" + bytes(node_account.key).hex()
    op_key, other_key = chain.accounts[4][1], chain.accounts[5][1]
    code, _, exc = _invoke(
        "node", "register", "--node-private-key", node_key, "--payout", payout,
        "--private-key", op_key,
    )  # fmt: skip
    assert code == 0, exc
    result = runner.invoke(
        app, ["node", "stake", "--node", node, "--private-key", op_key, "--no-wait", "--json"]
    )
    assert result.exit_code == 0, result.exception
    sent = json.loads(result.stdout)  # the hash only: it did not wait for the receipt
    assert sent["waited"] is False and sent["call"] == "StakeManager.stake"
    assert f"tx {sent['tx']} sent" in result.stderr and "mined" not in result.stderr
    receipt = chain.w3.eth.wait_for_transaction_receipt(sent["tx"])
    assert receipt["status"] == 1 and ChainClient(chain.rpc_url, deployment).is_active(node)
    _, _, exc = _invoke(
        "node", "unstake", "--node", node, "--amount", "0.1", "--private-key", other_key
    )
    assert isinstance(exc, ContractRevertError)
    assert exc.error_name == "NotOperator" and "operator" in exc.message


def test_bad_input_names_the_problem(cli_env: Path) -> None:
    _, _, exc = _invoke("node", "status", "--node", "0x1234")
    assert isinstance(exc, ConfigError) and "--node '0x1234'" in exc.message
    node = Account.create().address
    _, _, exc = _invoke(
        "node", "register", "--node-private-key", "0x" + "11" * 32,
        "--payout", Account.create().address,
    )  # fmt: skip
    assert isinstance(exc, ConfigError) and "--keystore" in exc.message
    _, _, exc = _invoke(
        "node", "stake", "--node", node, "--amount", "lots", "--private-key", "0x" + "11" * 32
    )
    assert isinstance(exc, ConfigError) and "'lots' is not a number" in exc.message


def test_missing_deployment_says_how_to_deploy(
    cli_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("COLOCO_DEPLOYMENT", str(tmp_path / "nope.json"))
    _, _, exc = _invoke("node", "status", "--node", Account.create().address)
    assert exc is not None and "coloco devnet deploy" in str(exc)


def test_config_file_supplies_rpc_and_deployment(
    cli_env: Path, monkeypatch: pytest.MonkeyPatch, chain: AnvilProcess, tmp_path: Path
) -> None:
    (tmp_path / "coloco.toml").write_text(
        f'rpc_url = "{chain.rpc_url}"\ndeployment = "{cli_env}"\n'
    )
    monkeypatch.delenv("COLOCO_RPC_URL")
    monkeypatch.delenv("COLOCO_DEPLOYMENT")
    code, _out, exc = _invoke("node", "status", "--node", Account.create().address)
    assert code == 0, exc
    (tmp_path / "coloco.toml").write_text('rpc = "x"\n')
    _, _, exc = _invoke("node", "status", "--node", Account.create().address)
    assert isinstance(exc, ConfigError) and "unknown key(s) ['rpc']" in exc.message


def test_node_status_shows_the_journals_unsent_and_lost_rounds(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, tmp_path: Path
) -> None:
    """A node's journal (its state folder) holds round 2 unsent and round 1 refused for good:
    `node status` names both, in the table and in --json; another node's journal is not shown."""
    import torch

    from protocol.eip712 import Eip712Domain
    from protocol.keys import NodeKey
    from trainer.network.ledger_client import LedgerClient, RetryPolicy
    from trainer.round.attest import Attester, WorkRecord
    from trainer.round.journal import Journal

    key = NodeKey.from_private_key(bytes(Account.create().key))
    domain = Eip712Domain(chain_id=31337, verifying_contract=key.address)
    state = tmp_path / "checkpoints" / "run" / "node"
    dead = LedgerClient("http://127.0.0.1:9", retry=RetryPolicy(attempts=1))
    attester = Attester(key, domain, bytes(32), dead, journal=Journal(state))
    for r in (1, 2):
        work = WorkRecord(r, 0, bytes(32), {"w": torch.ones(2)}, bytes(32), 1, 32, bytes(32),
                          bytes(32))  # fmt: skip
        attester.publish(work, [key.address])
    Journal(state).lost(attester.backlog[0], "round_closed: round 1 closed without it")
    node = str(key.address)
    code, out, exc = _invoke(
        "node", "status", "--node", node, "--checkpoint-dir", str(tmp_path / "checkpoints")
    )
    assert code == 0, exc
    assert re.search(r"unsent rounds\s*│\s*2\s", out) and "1 (round_closed" in out, out
    result = runner.invoke(app, ["node", "status", "--node", node, "--json",
                                 "--checkpoint-dir", str(tmp_path / "checkpoints")])  # fmt: skip
    st = json.loads(result.stdout)
    assert st["unsent_rounds"] == [2] and list(st["lost_rounds"]) == ["1"], st
    other = Account.create().address
    result = runner.invoke(app, ["node", "status", "--node", other, "--json",
                                 "--checkpoint-dir", str(tmp_path / "checkpoints")])  # fmt: skip
    assert json.loads(result.stdout)["unsent_rounds"] == []
