"""protocol.chain_reader.ChainReader: the views without web3 answer as ChainClient's do.

Both read the same real anvil and deployment; static types are encoded by the reader itself,
dynamic ones by eth_abi, and a revert decodes to the same custom error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from protocol.chain import ChainClient
from protocol.chain_reader import ChainReader
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.errors import ContractRevertError, RpcUnavailableError
from protocol.types import Address

pytestmark = [pytest.mark.anvil]


@pytest.fixture
def both(chain: AnvilProcess, deployment: Deployment) -> tuple[ChainReader, ChainClient]:
    return ChainReader(chain.rpc_url, deployment), ChainClient(chain.rpc_url, deployment)


def test_reader_views_equal_the_chain_clients(
    both: tuple[ChainReader, ChainClient], holders: Any, chain: AnvilProcess
) -> None:
    reader, client = both
    for holder in holders:  # real balances and claims (a committed root paid them)
        account = Address(holder.address)
        assert reader.claimed(account) == client.claimed(account) > 0
        assert reader.token_balance(account) == client.token_balance(account) > 0
    node = Address(chain.accounts[3][0])
    assert reader.node_info(node) == client.node_info(node)  # a struct with addresses
    assert reader.training_config.version() == client.training_config.version()
    assert reader.training_config.current() == client.training_config.current()
    assert reader.training_config.min_stake() == client.training_config.min_stake()
    assert reader.training_config.pool_rewards() == client.training_config.pool_rewards()
    assert reader.stake_manager.is_frozen(node) is client.stake_manager.is_frozen(node) is False
    targets, values = [str(reader.deployment.address("TrainingConfig"))], [0]
    calldatas, description = [b"\x01\x02"], bytes(range(32))  # dynamic arrays: eth_abi
    assert reader.model_governor.hash_proposal(
        targets, values, calldatas, description
    ) == client.model_governor.hash_proposal(targets, values, calldatas, description)


def test_reader_decodes_a_revert_and_names_an_rpc_that_does_not_answer(
    both: tuple[ChainReader, ChainClient], deployment: Deployment
) -> None:
    reader, client = both
    with pytest.raises(ContractRevertError) as got:
        reader.model_governor.state(12345)
    with pytest.raises(ContractRevertError) as want:
        client.model_governor.state(12345)
    assert got.value.error_name == want.value.error_name == "GovernorNonexistentProposal"
    with pytest.raises(RpcUnavailableError, match=r"127\.0\.0\.1:9\b"):
        ChainReader("http://127.0.0.1:9", deployment).training_config.min_stake()


def test_reader_does_not_import_web3() -> None:
    code = "import json, sys, protocol.chain_reader; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = {m.split(".")[0] for m in json.loads(out.stdout)}
    assert not loaded & {"web3", "eth_account", "eth_abi", "eth_utils", "pydantic"}, loaded
