"""The typed contract views and the one TrainingConfig field list, held to the ABIs."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from eth_account import Account

from protocol import views
from protocol.abi_struct import as_dataclass, outputs, snake_case
from protocol.chain import ChainClient
from protocol.deployment import Deployment, abi
from protocol.devnet import AnvilProcess
from protocol.errors import ConfigError, DeploymentError
from reference.settings import TrainingSettings, WireFormat

VIEWS = [
    cls
    for cls in vars(views).values()
    if isinstance(cls, type)
    and issubclass(cls, views.ContractView)
    and cls is not views.ContractView
]


def test_snake_case_spells_solidity_names_as_python_does() -> None:
    assert snake_case("innerLrE6") == "inner_lr_e6"
    assert snake_case("releasedCheckpointURI") == "released_checkpoint_uri"
    assert snake_case("forVotes") == "for_votes"
    assert snake_case("dataMixtureBps") == "data_mixture_bps"


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: v.CONTRACT)
def test_every_view_method_is_a_view_function_of_its_contract(view: type) -> None:
    """Each public method is the contract's function of that name in snake case, read-only,
    with as many arguments as the ABI's inputs."""
    functions = {
        snake_case(f["name"]): f for f in abi(view.CONTRACT) if f.get("type") == "function"
    }
    methods = [n for n, _ in inspect.getmembers(view, inspect.isfunction) if not n.startswith("_")]
    assert methods, view
    for name in methods:
        assert name in functions, f"{view.CONTRACT} has no function {name}"
        fn = functions[name]
        assert fn["stateMutability"] in ("view", "pure"), f"{view.CONTRACT}.{fn['name']}"
        params = inspect.signature(getattr(view, name)).parameters
        positional = [p for p in params.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert len(positional) - 1 == len(fn["inputs"]), f"{view.CONTRACT}.{fn['name']}"


def test_the_settings_list_is_the_struct_of_the_abi_in_its_order() -> None:
    (config,) = outputs("TrainingConfig", "current")
    struct = [snake_case(c["name"]) for c in config["components"]]
    assert [f.name for f in dataclasses.fields(TrainingSettings)] == ["version", *struct]


def test_a_record_that_differs_from_the_abi_is_refused_naming_the_difference() -> None:
    @dataclasses.dataclass(frozen=True)
    class Tally:
        against_votes: int
        for_votes: int

    with pytest.raises(DeploymentError, match=r"missing \[\], unexpected \['abstain_votes'\]"):
        as_dataclass(
            Tally, {"againstVotes": 1, "forVotes": 2, "abstainVotes": 3}, where="proposalVotes"
        )


@pytest.mark.anvil
def test_the_json_form_round_trips_and_refuses_unknown_keys(
    chain: AnvilProcess, deployment: Deployment
) -> None:
    settings = TrainingSettings.read(ChainClient(chain.rpc_url, deployment))
    data = settings.to_json()
    assert data["wire_format"] == settings.wire_format.label
    assert TrainingSettings.from_json(data) == settings
    assert len(settings.governed_hash()) == 64
    with pytest.raises(ConfigError, match=r"unknown keys \['salt'\]"):
        TrainingSettings.from_json(data | {"salt": 1})
    with pytest.raises(ConfigError, match="fp32, bf16, int8"):
        TrainingSettings.from_json(data | {"wire_format": "fp8"})


@pytest.mark.anvil
def test_the_views_read_a_fresh_deployment(chain: AnvilProcess, deployment: Deployment) -> None:
    client = ChainClient(chain.rpc_url, deployment, Account.from_key(chain.accounts[0][1]))
    assert client.training_config.version() >= 1
    assert client.training_config.ownership_split() == (10_000, 0, 0)
    compute, code, capital = client.training_config.pool_rewards()
    settings = TrainingSettings.read(client)
    assert (compute, code, capital) == (settings.reward_per_round, 0, 0)
    assert client.training_config.min_stake() == settings.min_stake
    assert settings.wire_format is WireFormat.INT8 and settings.inner_lr == pytest.approx(0.003)
    assert client.stake_manager.proposal_count() == 0
    assert client.stake_manager.slash_proposal(1).status == 0
    assert client.model_share_token.total_supply() == 0
    assert client.model_governor.proposal_threshold() >= 0
