"""What every test of a real node against the real ledger and anvil takes, as one object (the
``rig`` fixture of tests/redteam/conftest.py builds it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ledger.core.config import Settings
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.keys import NodeKey


@dataclass(frozen=True)
class Rig:
    """What every test of a real node against the real ledger and anvil takes: the chain and its
    deployment, the ledger's settings on a database, the node's key (registered and staked),
    the run's data, a free rendezvous port and a scratch folder."""

    chain: AnvilProcess
    deployment: Deployment
    settings_for: Callable[..., Settings]
    db_url: str
    key: NodeKey
    corpus: Path
    port: int
    work: Path
