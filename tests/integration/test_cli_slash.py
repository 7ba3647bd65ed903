"""`coloco slash report | propose | veto | execute | status` on the real anvil and contracts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from eth_account import Account
from typer.testing import CliRunner

from coloco_cli.main import app
from protocol.attestation import ComputeAttestation
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.errors import ConfigError, ContractRevertError
from protocol.signing import sign_attestation
from protocol.types import Address, Bytes32, RoundNumber, RunId
from tests.integration.conftest import Holder, cli_ok

pytestmark = [pytest.mark.integration, pytest.mark.anvil]

runner = CliRunner()


def _json(*args: str) -> dict[str, object]:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, f"{args}: {result.exception!r}\n{result.output}"
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert isinstance(data, dict)
    return data


def _err(*args: str) -> BaseException:
    result = runner.invoke(app, list(args))
    assert result.exception is not None, result.output
    return result.exception


def _staked_node(chain: AnvilProcess, deployment: Deployment, stake: int) -> tuple[bytes, Address]:
    operator = ChainClient(chain.rpc_url, deployment, Account.from_key(chain.accounts[3][1]))
    node = Account.create()
    key = bytes(node.key)
    operator.register_node(
        key, Address(chain.accounts[3][0]), operator=Address(chain.accounts[3][0])
    )
    operator.transact("StakeManager", "stake", node.address, value=stake)
    return key, Address(node.address)


def _evidence(path: Path, att: ComputeAttestation, key: bytes, viewer: ChainClient) -> Path:
    sig = sign_attestation(att, viewer.attestation_domain(), key)
    path.write_text(json.dumps({"attestation": att.to_json(), "signature": "0x" + sig.hex()}))
    return path


def test_report_equivocation_slashes_at_once_and_pays_the_reporter(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment
) -> None:
    key, node = _staked_node(chain, deployment, 10 * 10**18)
    viewer = ChainClient(chain.rpc_url, deployment)
    att = ComputeAttestation(
        run_id=RunId(b"\x01" * 32), round=RoundNumber(4), node=node, config_version=1,
        base_checkpoint=Bytes32(b"\x02" * 32), pseudo_gradient=Bytes32(b"\x03" * 32),
        data_shard=Bytes32(b"\x04" * 32), inner_steps=50, tokens=100,
        result_checkpoint=Bytes32(b"\x05" * 32), trace_root=Bytes32(b"\x06" * 32),
    )  # fmt: skip
    first = _evidence(cli_env.parent / "a.json", att, key, viewer)
    twin = att.replace(result_checkpoint=Bytes32(b"\x06" * 32))
    second = _evidence(cli_env.parent / "b.json", twin, key, viewer)
    reporter_address, reporter_key = chain.accounts[8]
    before = chain.w3.eth.get_balance(reporter_address)

    exc = _err("slash", "report", "--first", str(first), "--second", str(first),
               "--private-key", reporter_key)  # fmt: skip
    assert isinstance(exc, ConfigError) and "not an equivocation" in exc.message

    out = cli_ok("slash", "report", "--first", str(first), "--second", str(second),
              "--private-key", reporter_key)  # fmt: skip
    assert f"node {node} slashed 1 ETH" in out
    assert out.index("tx 0x") < out.index("mined in block") < out.index("slashed 1 ETH")
    assert viewer.node_info(node).staked == 9 * 10**18  # the governed 10 %
    gained = chain.w3.eth.get_balance(reporter_address) - before
    assert 0.09 * 10**18 < gained <= 0.1 * 10**18  # the 10 % reporter share, minus gas

    exc = _err("slash", "report", "--first", str(first), "--second", str(second),
               "--private-key", reporter_key)  # fmt: skip
    assert isinstance(exc, ContractRevertError)
    assert exc.error_name == "EquivocationAlreadySlashed" and "already slashed" in exc.message


def test_governance_slash_freezes_then_veto_or_execute(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    _, node = _staked_node(chain, deployment, 2 * 10**18)
    alice, _ = holders
    ids = []
    out = cli_ok("slash", "propose", "--node", node, "--amount", "0.5", "--evidence",
              "copied gradients", "--private-key", alice.key)  # fmt: skip
    match = re.search(r"proposal (\d+) created", out)
    assert match, out
    ids.append(match.group(1))
    proposed = _json("slash", "propose", "--node", node, "--amount", "0.5", "--evidence",
                     "stale checkpoint", "--private-key", alice.key)  # fmt: skip
    assert "stale checkpoint" in proposed["description"]
    ids.append(proposed["proposal_id"])
    chain.increase_time(2)
    for pid in ids:
        cli_ok("gov", "vote", pid, "--support", "for", "--private-key", alice.key)
    chain.increase_time(21)
    for pid in ids:
        cli_ok("gov", "queue", pid, "--private-key", alice.key)
    chain.increase_time(2)
    for pid in ids:
        cli_ok("gov", "execute", pid, "--private-key", alice.key)

    viewer = ChainClient(chain.rpc_url, deployment)
    assert viewer.stake_manager.is_frozen(node)
    assert "pending" in cli_ok("slash", "status", "1")
    node_id = viewer.stake_manager.node_id_of(node)
    st = _json("slash", "status", "1")
    assert st["state"] == "pending" and st["node_id"] == node_id and node_id > 0
    assert st["amount_wei"] == str(5 * 10**17)  # above 2^53: a decimal string for JavaScript
    exc = _err("slash", "veto", "1", "--private-key", alice.key)
    assert isinstance(exc, ContractRevertError) and exc.error_name == "NotGuardian"
    guardian_key = dict(chain.accounts)[deployment.guardian]
    vetoed = _json("slash", "veto", "1", "--private-key", guardian_key)
    assert vetoed["state"] == "vetoed" and vetoed["tx"].startswith("0x")
    assert _json("slash", "status", "1")["state"] == "vetoed"

    exc = _err("slash", "execute", "2", "--private-key", alice.key)
    assert isinstance(exc, ContractRevertError) and exc.error_name == "SlashNotReady"
    chain.increase_time(deployment.governance["slash_dispute_window"])
    assert "0.5 ETH taken" in cli_ok("slash", "execute", "2", "--private-key", alice.key)
    assert viewer.node_info(node).staked == 15 * 10**17
    assert not viewer.stake_manager.is_frozen(node)
    exc = _err("slash", "status", "9")
    assert isinstance(exc, ConfigError) and "ids run from 1 to 2" in exc.message
    assert runner.invoke(app, ["slash", "status", "0"]).exit_code == 2  # a usage error
