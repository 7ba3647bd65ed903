"""The red team's network settings and what governance sets on chain for it: H and the inner lr
(``setInnerLoop``, as the Timelock), and ``SLASHER_ROLE`` for the ledger's slasher key when it has
one. Both red-team networks use them: the real nodes of :mod:`bench.redteam.realnet` and the
in-process network of the tests (``tests/redteam/network.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from eth_account import Account

from protocol.deployment import Deployment, abi
from protocol.devnet import AnvilProcess

ADMIN = "redteam-admin-token-0123456789"


@dataclass(frozen=True)
class NetConfig:
    inner_steps: int = 8
    inner_lr_e6: int = 1000
    batch: int = 4
    audit_fraction: float = 0.1
    join_window_s: float = 1.5
    seed: int = 0
    slasher_key: str | None = None  # the ledger's SLASHER_ROLE key (granted by the Timelock)


def configure_chain(anvil: AnvilProcess, dep: Deployment, cfg: NetConfig) -> None:
    """Set H and the inner lr as the Timelock (what an executed vote does)."""
    timelock = dep.address("TimelockController")
    tc = anvil.w3.eth.contract(  # type: ignore[call-overload]
        address=dep.address("TrainingConfig"), abi=abi("TrainingConfig")
    )
    anvil.transact_as(timelock, tc, "setInnerLoop", cfg.inner_steps, cfg.inner_lr_e6)
    if cfg.slasher_key is not None:  # governance grants the ledger's key SLASHER_ROLE
        slasher = Account.from_key(cfg.slasher_key).address
        anvil.call("anvil_setBalance", [slasher, hex(10**19)])
        sm = anvil.w3.eth.contract(  # type: ignore[call-overload]
            address=dep.address("StakeManager"), abi=abi("StakeManager")
        )
        anvil.transact_as(timelock, sm, "grantRole", sm.functions.SLASHER_ROLE().call(), slasher)
