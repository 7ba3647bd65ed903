"""Red-team fixtures: a network on the session's anvil (snapshotted and reverted per test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from tests.redteam.network import NetConfig, Network


@pytest.fixture
def network(chain: AnvilProcess, deployment: Deployment, tmp_path: Path) -> Iterator[Network]:
    torch.set_num_threads(1)
    dep_path = tmp_path / "deployment.json"
    deployment.save(dep_path)
    net = Network(chain, deployment, dep_path, tmp_path, NetConfig(audit_fraction=0.1))
    with net.running():
        yield net
    net.ledger.stop()
