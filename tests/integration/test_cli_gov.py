"""`coloco gov delegate | propose | vote | queue | execute | status | list` on the real anvil."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from eth_account import Account
from typer.testing import CliRunner

from coloco_cli.gov.changes import parse_sets
from coloco_cli.main import app
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.errors import ConfigError
from reference.settings import TrainingSettings
from tests.integration.conftest import Holder, cli_ok

pytestmark = [pytest.mark.integration, pytest.mark.anvil]

runner = CliRunner()


def _err(*args: str) -> BaseException:
    result = runner.invoke(app, list(args))
    assert result.exception is not None, result.output
    return result.exception


def test_holders_change_the_inner_steps_through_the_timelock(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    viewer = ChainClient(chain.rpc_url, deployment)
    before = TrainingSettings.read(viewer)
    alice, bob = holders

    out = cli_ok("gov", "propose", "--set", "inner-steps=30", "--private-key", alice.key)
    proposal = re.search(r"proposal (\d+) created", out)
    assert proposal, out
    pid = proposal.group(1)

    exc = _err("gov", "vote", pid, "--support", "for", "--private-key", alice.key)
    assert (
        isinstance(exc, ConfigError)
        and "Pending" in exc.message
        and "evm_increaseTime" in exc.message
    )

    chain.increase_time(2)
    cli_ok("gov", "vote", pid, "--support", "for", "--private-key", alice.key)
    cli_ok("gov", "vote", pid, "--support", "against", "--private-key", bob.key)
    votes = viewer.model_governor.proposal_votes(int(pid))
    against, for_ = votes.against_votes, votes.for_votes
    assert (for_, against) == (alice.amount, bob.amount)

    exc = _err("gov", "queue", pid, "--private-key", alice.key)
    assert isinstance(exc, ConfigError) and "Active" in exc.message

    chain.increase_time(21)
    assert "Succeeded" in cli_ok("gov", "status", pid)
    cli_ok("gov", "queue", pid, "--private-key", alice.key)
    chain.increase_time(2)
    out = cli_ok("gov", "execute", pid, "--private-key", bob.key)
    assert f"version is now {before.version + 1}" in out

    after = TrainingSettings.read(viewer)
    assert after.inner_steps == 30
    assert after.inner_lr_e6 == before.inner_lr_e6  # the other field of setInnerLoop is kept
    assert after.version == before.version + 1
    listing = cli_ok("gov", "list")
    assert "Executed" in listing and "setInnerLoop(30," in listing


def test_delegate_moves_votes(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    viewer = ChainClient(chain.rpc_url, deployment)
    alice, bob = holders
    # a transfer in the latest block writes both holders' vote checkpoints in that block; the
    # delegation mined in the next block must push new ones (more gas than estimated there)
    sender = ChainClient(chain.rpc_url, deployment, Account.from_key(bob.key))
    sender.transact("ModelShareToken", "transfer", alice.address, 1)
    cli_ok("gov", "delegate", "--to", bob.address, "--private-key", alice.key)
    assert viewer.model_share_token.get_votes(bob.address) == alice.amount + bob.amount
    assert viewer.model_share_token.get_votes(alice.address) == 0


def test_set_parsing_names_what_is_wrong() -> None:
    assert parse_sets(["inner-steps=30", "outer-lr=0.5", "wire-format=bf16"]) == {
        "innerSteps": 30,
        "outerLrE6": 500_000,
        "wireFormat": 1,
    }
    assert parse_sets(["data-mixture=7000,3000"]) == {"dataMixtureBps": [7000, 3000]}
    assert parse_sets(["min-stake=2"]) == {"minStake": 2 * 10**18}
    with pytest.raises(ConfigError, match="unknown setting 'inner-stepz'"):
        parse_sets(["inner-stepz=3"])
    with pytest.raises(ConfigError, match="NAME=VALUE"):
        parse_sets(["inner-steps"])
    with pytest.raises(ConfigError, match="whole number"):
        parse_sets(["inner-steps=many"])
    with pytest.raises(ConfigError, match="at most 6 decimal places"):
        parse_sets(["inner-lr=0.0000001"])
    with pytest.raises(ConfigError, match="set twice"):
        parse_sets(["inner-steps=3", "inner-steps=4"])


def test_unknown_proposal_and_bad_support(cli_env: Path, holders: list[Holder]) -> None:
    exc = _err("gov", "status", "12345")
    assert isinstance(exc, ConfigError) and "coloco gov list" in exc.message
    exc = _err("gov", "vote", "12", "--support", "maybe", "--private-key", holders[0].key)
    assert isinstance(exc, ConfigError) and "for, against, abstain" in exc.message


def test_holders_release_a_checkpoint(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    """`--set released-checkpoint` maps to TrainingConfig.releaseCheckpoint(checkpoint, uri)."""
    alice, _ = holders
    checkpoint = "0x" + "ab" * 32
    exc = _err("gov", "propose", "--set", f"released-checkpoint={checkpoint}",
               "--private-key", alice.key)  # fmt: skip
    assert isinstance(exc, ConfigError) and "released-checkpoint-uri" in exc.message
    result = runner.invoke(app, [
        "gov", "propose", "--set", f"released-checkpoint={checkpoint}",
        "--set", "released-checkpoint-uri=https://example.org/final.safetensors",
        "--private-key", alice.key, "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, (result.output, result.exception)
    pid = json.loads(result.stdout)["proposal_id"]
    chain.increase_time(2)
    cli_ok("gov", "vote", pid, "--support", "for", "--private-key", alice.key)
    chain.increase_time(21)
    cli_ok("gov", "queue", pid, "--private-key", alice.key)
    chain.increase_time(2)
    cli_ok("gov", "execute", pid, "--private-key", alice.key)
    cfg = TrainingSettings.read(ChainClient(chain.rpc_url, deployment))
    assert "0x" + bytes(cfg.released_checkpoint).hex() == checkpoint
    assert cfg.released_checkpoint_uri == "https://example.org/final.safetensors"


def test_list_and_status_show_full_ids_and_utc_times_and_take_a_prefix(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    alice, _ = holders
    result = runner.invoke(app, ["gov", "propose", "--set", "inner-steps=33",
                                 "--private-key", alice.key, "--json"])  # fmt: skip
    assert result.exit_code == 0, (result.output, result.exception)
    created = json.loads(result.stdout)
    pid = created["proposal_id"]
    assert len(pid) > 70

    listing = runner.invoke(app, ["gov", "list"])
    assert listing.exit_code == 0, listing.output
    assert pid in listing.output.split()  # the whole id, on one line, never cut
    assert "voting " in listing.output and "(opens in" in listing.output
    assert " UTC" in listing.output and str(created["vote_start"]) not in listing.output
    # what it does, decoded from its calldata, in the units `--set` takes
    assert "does: TrainingConfig.setInnerLoop(inner-steps=33, inner-lr=0.003)" in listing.output

    prefix = pid[:8]
    status = cli_ok("gov", "status", prefix)
    assert f"proposal {pid}" in status and "Pending" in status
    assert "(opens in" in status and "(ends in" in status and " UTC" in status
    assert str(created["vote_end"]) not in status  # no raw unix seconds
    assert "TrainingConfig.setInnerLoop(inner-steps=33, inner-lr=0.003)" in status

    chain.increase_time(2)
    cli_ok("gov", "vote", prefix, "--support", "for", "--private-key", alice.key)
    viewer = ChainClient(chain.rpc_url, deployment)
    assert viewer.model_governor.proposal_votes(int(pid)).for_votes == alice.amount
    status = cli_ok("gov", "status", prefix)
    assert "Active" in status and "(opened " in status and " ago)" in status

    exc = _err("gov", "status", "9" * 5 if not pid.startswith("99999") else "1" * 5)
    assert isinstance(exc, ConfigError) and "no proposal" in exc.message
