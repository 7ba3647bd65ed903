"""`coloco keys new | import | list | show`, and `--account NAME` as the sender on anvil."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from typer.testing import CliRunner

from coloco_cli.main import app
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.errors import ConfigError, KeystoreError
from protocol.types import Address

pytestmark = [pytest.mark.integration, pytest.mark.anvil]

runner = CliRunner()


def _json(*args: str) -> Any:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, (args, result.output, result.exception)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_named_accounts_new_import_list_show_and_send(
    cli_env: Path,
    chain: AnvilProcess,
    deployment: Deployment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLOCO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLOCO_PASSWORD", "devnet-only-password")
    assert _json("keys", "list")["accounts"] == []

    payout = Account.create().address
    node = _json("keys", "new", "--name", "node1", "--payout", payout, "--light-kdf")
    op_address, op_key = chain.accounts[6]
    key_file = tmp_path / "op.key"
    key_file.write_text(op_key + "\n")
    imported = _json("keys", "import", "op", "--private-key-file", str(key_file), "--light-kdf")
    assert imported["address"] == op_address
    listed = {a["name"]: a for a in _json("keys", "list")["accounts"]}
    assert listed["op"]["address"] == op_address and listed["node1"]["payout"] == payout
    shown = runner.invoke(app, ["keys", "show", "node1", "--field", "address"])
    assert shown.stdout.strip() == node["address"]

    again = runner.invoke(app, ["keys", "import", "op", "--private-key-file", str(key_file)])
    assert isinstance(again.exception, KeystoreError)  # an account is never overwritten silently
    key_file.write_text("0x1234")
    bad = runner.invoke(app, ["keys", "import", "short", "--private-key-file", str(key_file)])
    assert isinstance(bad.exception, ConfigError) and "32 bytes" in bad.exception.message

    # the named accounts sign: the node key its proof, the operator account the transaction
    registered = _json("node", "register", "--node-account", "node1", "--payout", payout,
                       "--account", "op")  # fmt: skip
    assert registered["node"] == node["address"] and registered["node_id"] > 0
    info = ChainClient(chain.rpc_url, deployment).node_info(Address(node["address"]))
    assert info.operator == op_address and info.payout == payout
    monkeypatch.setenv("COLOCO_ACCOUNT", "op")  # the environment names the sender too
    staked = _json("node", "stake", "--node", node["address"])
    assert staked["active"] is True
    missing = runner.invoke(app, ["node", "stake", "--node", node["address"], "--account", "nope"])
    assert isinstance(missing.exception, ConfigError)
    assert "coloco keys new --name nope" in missing.exception.message
