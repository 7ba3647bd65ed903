"""`coloco gov propose` and `gov vote` refuse before any transaction what would be wasted: a value
TrainingConfig reverts at execute, a consequence worth a second look, a vote that counts 0.

All against the real anvil devnet and the real deployment; "before any transaction" is the
sender's nonce and the Governor's ProposalCreated count, unchanged.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from eth_account import Account
from typer.testing import CliRunner

from coloco_cli.gov import bounds
from coloco_cli.gov.changes import parse_sets, setter_calls
from coloco_cli.logs import event_logs
from coloco_cli.main import app
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.errors import ConfigError
from protocol.types import Address
from reference.settings import WireFormat
from tests.integration.conftest import Holder, cli_ok

pytestmark = [pytest.mark.integration, pytest.mark.anvil]

runner = CliRunner()


def _refused(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert isinstance(result.exception, ConfigError), (result.exception, result.output)
    return " ".join(result.exception.message.split())


def _sent(viewer: ChainClient, address: str) -> tuple[int, int]:
    """(the sender's nonce, proposals created): what any transaction would have moved."""
    start = int(viewer.deployment.deployment_block)
    created = len(event_logs(viewer, "ModelGovernor", "ProposalCreated", from_block=start))
    return viewer.w3.eth.get_transaction_count(Address(address)), created


# the seven out-of-range values and its two unparsable ones, each with the range it names
OUT_OF_RANGE = [
    ("inner-steps=0", "--set inner-steps=0: out of range", "1..100000 (MAX_INNER_STEPS)"),
    ("inner-steps=1e8", "--set inner-steps=100000000", "1..100000 (MAX_INNER_STEPS)"),
    ("max-nodes=0", "--set max-nodes=0", "1..65536 (MAX_NODES), nodes per round"),
    ("trace-interval=0", "--set trace-interval=0", "1..100000 (MAX_TRACE_INTERVAL)"),
    ("data-mixture=5000,4000", "sums to 9000, not 10000", "summing to exactly 10000"),
    ("inner-lr=5", "--set inner-lr=5", "0.000001..1 (MAX_INNER_LR_E6)"),
    ("outer-momentum=2", "--set outer-momentum=2", "0..0.999999 (MOMENTUM_ONE_E6)"),
    ("outer-lr=50", "--set outer-lr=50", "0.000001..10 (MAX_OUTER_LR_E6)"),
    ("inner-steps=-5", "--set inner-steps=-5", "1..100000 (MAX_INNER_STEPS), inner steps"),
    ("wire-format=fp64", "not a wire format", "fp32, bf16, int8"),
]


@pytest.mark.parametrize(("change", "what", "allowed"), OUT_OF_RANGE)
def test_propose_refuses_out_of_range_values_before_any_transaction(
    cli_env: Path,
    chain: AnvilProcess,
    deployment: Deployment,
    holders: list[Holder],
    change: str,
    what: str,
    allowed: str,
) -> None:
    viewer = ChainClient(chain.rpc_url, deployment)
    alice, _ = holders
    before = _sent(viewer, alice.address)
    message = _refused("gov", "propose", "--set", change, "--private-key", alice.key)
    assert what in message and allowed in message, message
    assert _sent(viewer, alice.address) == before


def test_force_proposes_what_the_contract_would_revert_but_not_what_it_cannot_encode(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    viewer = ChainClient(chain.rpc_url, deployment)
    alice, _ = holders
    nonce, created = _sent(viewer, alice.address)
    message = _refused("gov", "propose", "--set", "inner-steps=-5", "--force",
                       "--private-key", alice.key)  # fmt: skip
    assert "1..100000" in message and "--force" not in message
    assert _sent(viewer, alice.address) == (nonce, created)
    out = cli_ok("gov", "propose", "--set", "inner-steps=0", "--force", "--private-key", alice.key)
    assert "created" in out and "setInnerLoop(0," in out
    assert _sent(viewer, alice.address) == (nonce + 1, created + 1)


def test_the_range_table_matches_the_contract_at_every_edge(
    chain: AnvilProcess, deployment: Deployment
) -> None:
    """Each range's both edges run as the Timelock would: the contract accepts the edge and
    refuses one step beyond it, so a change to TrainingConfig.sol's checks fails here."""
    viewer = ChainClient(chain.rpc_url, deployment)
    consts = bounds.constants(viewer)
    abi = viewer.contract("TrainingConfig").abi
    types = bounds._param_types(abi)
    current = viewer.training_config.current()

    def refused(field: str, value: object) -> bool:
        changes = {field: value}
        by_table = field in bounds.range_refusals(changes, consts, abi)
        by_contract = bool(bounds.simulate(viewer, setter_calls(abi, current, changes)))
        assert by_table == by_contract, (field, value, by_table, by_contract)
        return by_contract

    for r in bounds.RANGES:
        high = r.high(consts, bounds._type_max(types[r.field]))
        assert not refused(r.field, r.low) and not refused(r.field, high), r
        if r.low > 0:
            assert refused(r.field, r.low - 1), r
        if high < bounds._type_max(types[r.field]):
            assert refused(r.field, high + 1), r
    # the names `--set wire-format` accepts are the codes the contract allows
    assert max(WireFormat) == consts["MAX_WIRE_FORMAT"] and min(WireFormat) == 0
    bps, sources = consts["BPS"], consts["MAX_DATA_SOURCES"]
    assert not refused("dataMixtureBps", [bps - 1, 1])
    assert not refused("dataMixtureBps", [bps - sources + 1] + [1] * (sources - 1))
    assert refused("dataMixtureBps", [bps - 1])
    assert refused("dataMixtureBps", [bps - sources] + [1] * sources)
    assert refused("dataMixtureBps", [])


def _staked_node(chain: AnvilProcess, deployment: Deployment, stake: int) -> str:
    operator = ChainClient(chain.rpc_url, deployment, Account.from_key(chain.accounts[3][1]))
    node = Account.create()
    me = Address(chain.accounts[3][0])
    operator.register_node(bytes(node.key), me, operator=me)
    operator.transact("StakeManager", "stake", node.address, value=stake)
    return str(node.address)


def test_min_stake_above_active_nodes_says_how_many_drop_out(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    viewer = ChainClient(chain.rpc_url, deployment)
    alice, _ = holders
    low = _staked_node(chain, deployment, 10**18)
    _staked_node(chain, deployment, 3 * 10**18)
    active = len(bounds.active_stakes(viewer))
    before = _sent(viewer, alice.address)
    message = _refused("gov", "propose", "--set", "min-stake=2", "--private-key", alice.key)
    assert f"1 of the {active} active nodes stake less" in message, message
    assert low in message and "--force" in message
    assert _sent(viewer, alice.address) == before
    # a minimum every active node meets proposes without a word; --force proposes the other
    cli_ok("gov", "propose", "--set", "min-stake=0.5", "--private-key", alice.key)
    cli_ok("gov", "propose", "--set", "min-stake=2", "--force", "--private-key", alice.key)
    assert _sent(viewer, alice.address)[1] == before[1] + 2
    listing = cli_ok("gov", "list")
    assert "TrainingConfig.setMinStake(min-stake=0.5 ETH)" in listing
    assert "TrainingConfig.setMinStake(min-stake=2 ETH)" in listing


def test_zero_reward_is_refused_unless_forced(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    viewer = ChainClient(chain.rpc_url, deployment)
    alice, _ = holders
    before = _sent(viewer, alice.address)
    message = _refused("gov", "propose", "--set", "reward-per-round=0", "--private-key", alice.key)
    assert "no round would pay anyone" in message and "--force" in message
    assert _sent(viewer, alice.address) == before
    cli_ok("gov", "propose", "--set", "reward-per-round=0", "--force", "--private-key", alice.key)
    assert _sent(viewer, alice.address)[1] == before[1] + 1


def test_vote_with_zero_voting_power_says_delegate_first(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    viewer = ChainClient(chain.rpc_url, deployment)
    alice, bob = holders
    # carol delegated her 10 CMS to nobody; dave holds nothing; erin's 10 CMS arrive after the
    # snapshot (self-delegated on receipt, but not votes on this proposal)
    carol, dave, erin = Account.create(), Account.create(), Account.create()
    for acct in (carol, dave, erin):
        chain.call("anvil_setBalance", [acct.address, hex(10**19)])
    bob_client = ChainClient(chain.rpc_url, deployment, Account.from_key(bob.key))
    bob_client.transact("ModelShareToken", "transfer", carol.address, 10 * 10**18)
    carol_client = ChainClient(chain.rpc_url, deployment, Account.from_key(carol.key))
    carol_client.transact("ModelShareToken", "delegate", "0x" + "00" * 20)
    out = cli_ok("gov", "propose", "--set", "inner-steps=31", "--private-key", alice.key)
    found = re.search(r"proposal (\d+) created", out)
    assert found, out
    pid = found.group(1)
    chain.increase_time(2)
    bob_client.transact("ModelShareToken", "transfer", erin.address, 10 * 10**18)

    for acct, held in (
        (carol, "holds 10 CMS but delegated them to nobody"),
        (dave, "holds no CMS"),
        (erin, "holds 10 CMS, but they were not its votes at this proposal's snapshot"),
    ):
        key = "0x" + bytes(acct.key).hex()
        before = _sent(viewer, acct.address)
        message = _refused("gov", "vote", pid, "--support", "for", "--private-key", key)
        assert "0 voting power" in message and held in message, message
        assert "Delegate first: `coloco gov delegate`" in message and "--force" in message
        assert _sent(viewer, acct.address)[0] == before[0]
    # the command the refusal names exists
    named = re.search(r"`coloco (gov delegate)`", message)
    assert named and runner.invoke(app, [*named.group(1).split(), "--help"]).exit_code == 0

    carol_key = "0x" + bytes(carol.key).hex()
    cli_ok("gov", "vote", pid, "--support", "against", "--force", "--private-key", carol_key)
    assert viewer.model_governor.proposal_votes(int(pid)).against_votes == 0
    assert viewer.call("ModelGovernor", "hasVoted", int(pid), carol.address)
    # a holder with votes is not stopped
    cli_ok("gov", "vote", pid, "--support", "for", "--private-key", alice.key)


def test_set_parsing_reads_scientific_whole_numbers_and_names_wire_formats() -> None:
    assert parse_sets(["inner-steps=1e3", "max-nodes=1_000"]) == {
        "innerSteps": 1000,
        "maxNodes": 1000,
    }
    assert parse_sets(["wire-format=BF16"]) == {"wireFormat": 1}
    assert parse_sets(["wire-format=sparse"]) == {"wireFormat": 3}  # a vote switches it on
    with pytest.raises(ConfigError, match="whole number"):
        parse_sets(["inner-steps=2.5"])
    with pytest.raises(ConfigError, match="choose fp32, bf16, int8"):
        parse_sets(["wire-format=fp64"])


def test_what_the_table_does_not_describe_is_refused_by_running_it_as_the_timelock(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    """A released checkpoint's URI longer than MAX_URI_LENGTH has no row in the range table:
    the setter run as an eth_call from the Timelock reverts, and that is the refusal."""
    viewer = ChainClient(chain.rpc_url, deployment)
    alice, _ = holders
    before = _sent(viewer, alice.address)
    message = _refused("gov", "propose", "--set", "released-checkpoint=0x" + "ab" * 32,
                       "--set", "released-checkpoint-uri=https://x.org/" + "a" * 600,
                       "--private-key", alice.key)  # fmt: skip
    assert "would revert at execute with InvalidReleasedCheckpoint(0xabab" in message, message
    assert ", 614)" in message and "--force" in message
    assert _sent(viewer, alice.address) == before


DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_the_documented_refusal_is_what_propose_says(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    """docs/cli.md's `<!-- gov-refusal -->` example, run as written (plus the sender)."""
    text = DOC.read_text()
    block = re.search(r"<!-- gov-refusal -->\s*```text\n(.*?)```", text, re.S)
    assert block, "docs/cli.md: no ```text block after <!-- gov-refusal -->"
    command, *expected = [line.strip() for line in block.group(1).strip().splitlines()]
    args = command.removeprefix("$ coloco ").split()
    viewer = ChainClient(chain.rpc_url, deployment)
    before = _sent(viewer, holders[0].address)
    result = runner.invoke(app, [*args, "--private-key", holders[0].key])
    assert isinstance(result.exception, ConfigError), (result.exception, result.output)
    assert [line.strip() for line in result.exception.message.splitlines()] == expected
    assert _sent(viewer, holders[0].address) == before
