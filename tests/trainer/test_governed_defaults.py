"""The governed defaults agree: a freshly deployed TrainingConfig holds the inner and outer
settings the node runs without a chain and bench.diloco measures (trainer.round.runconfig)."""

from __future__ import annotations

import pytest
from eth_account import Account

from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from reference.settings import TrainingSettings
from trainer.round import runconfig
from trainer.round.runconfig import ChainConfig, RunConfig

pytestmark = pytest.mark.anvil


def test_a_fresh_deployment_governs_the_defaults_the_node_and_the_benchmark_use(
    chain: AnvilProcess, deployment: Deployment
) -> None:
    client = ChainClient(chain.rpc_url, deployment, Account.from_key(chain.accounts[0][1]))
    view = TrainingSettings.read(client)
    governed_view = (view.inner_steps, view.inner_lr, view.trace_interval, view.outer_lr,
                     view.outer_momentum)  # fmt: skip
    assert governed_view == (
        runconfig.INNER_STEPS,
        runconfig.INNER_LR,
        runconfig.TRACE_INTERVAL,
        runconfig.OUTER_LR,
        runconfig.OUTER_MOMENTUM,
    )
    governed = ChainConfig(client, batch_size=8).read().settings
    assert governed.inner.lr == RunConfig.make().settings.inner.lr
    assert governed.outer == RunConfig.make().settings.outer
    assert governed.trace_interval == RunConfig.make().settings.trace_interval


def test_the_node_batch_default_is_one_setting() -> None:
    """`coloco node run --batch-size`, the demo's nodes, RunConfig and bench.network (which imports
    the constant) default to the same rows per inner step."""
    import inspect

    from coloco_cli.demo.train import start_node
    from trainer.cli import run_command

    for fn in (run_command, start_node):
        assert inspect.signature(fn).parameters["batch_size"].default == runconfig.NODE_BATCH_SIZE
    assert RunConfig.make().settings.inner.batch_size == runconfig.NODE_BATCH_SIZE
