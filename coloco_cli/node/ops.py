"""What a node operator does on chain, as functions: the CLI and `coloco demo` both call them.

A node is its hot signing key (an address); the operator (the sender of these transactions)
registers it with a cold payout address, stakes for it in native currency, and later unstakes
(an unbonding delay) and withdraws. Reverts come back as the contract's custom error plus a hint.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coloco_cli.common import explained_revert, fmt_units
from protocol.errors import ConfigError

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount

    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

ZERO_ADDRESS = "0x0000000000000000000000000000000000000000"


@dataclass(frozen=True)
class NodeStatus:
    """A node's on-chain record."""

    node: str
    operator: str
    payout: str
    staked: int
    unbonding: int
    unbonding_ready_at: int
    active: bool
    min_stake: int
    node_id: int = 0
    retired: bool = False

    @property
    def registered(self) -> bool:
        return self.operator != ZERO_ADDRESS


def _hints(node: str) -> dict[str, str]:
    return {
        "NodeNotRegistered": (
            f"node {node} is not registered: run coloco node register --node {node} --payout 0x..."
        ),
        "NodeAlreadyRegistered": (
            f"node {node} is already registered: see coloco node status --node {node}"
        ),
        "NotOperator": f"only node {node}'s operator can do this: send it from the operator key",
        "StakeBelowMinimum": "the first stake must reach TrainingConfig.minStake: raise --amount",
        "InsufficientStake": f"not that much is staked: see coloco node status --node {node}",
        "NothingToWithdraw": (
            f"nothing is unbonding for node {node}: "
            f"run coloco node unstake --node {node} --amount ..."
        ),
        "StillUnbonding": "the unbonding delay has not passed yet: try again after the time shown",
        "ZeroAmount": "the amount must be more than zero",
        "ZeroAddress": "an address argument is zero: pass a real address",
        "WrongKeySigner": (
            "the node key proof was not signed by the node key: pass the node's own key "
            "(--node-keystore) and send from the operator key that the proof names"
        ),
        "ProofExpired": "the node key proof's deadline passed: sign a fresh one and resend",
        "NodeFrozen": (
            f"node {node} has a pending slash: its stake and key are frozen until the slash "
            f"is executed or vetoed (see coloco slash status)"
        ),
    }


def checksum(address: str, *, what: str = "address") -> str:
    """The checksummed form of `address`, or a ConfigError naming `what`."""
    from protocol.eip712 import ADDRESS_RE, is_address, to_checksum_address

    if not isinstance(address, str) or not ADDRESS_RE.match(address):
        raise ConfigError(f"{what} {address!r} is not a 0x-prefixed 20-byte address")
    if not is_address(address):
        raise ConfigError(
            f"{what} {address} has mixed case but a wrong EIP-55 checksum (a typo?): "
            "check it, or write it in lowercase"
        )
    return str(to_checksum_address(address))


def _send(chain: ChainClient, node: str, fn: str, *args: Any, value: int = 0) -> Any:
    with explained_revert(_hints(node), f"StakeManager.{fn}"):
        return chain.transact("StakeManager", fn, *args, value=value)


def node_status(chain: ChainClient, node: str) -> NodeStatus:
    """Read `node`'s record, whether it is active, and the current minimum stake."""
    from protocol.types import Address

    info = chain.node_info(Address(checksum(node, what="--node")))
    return NodeStatus(
        node=info.node,
        operator=info.operator,
        payout=info.payout,
        staked=info.staked,
        unbonding=info.unbonding,
        unbonding_ready_at=info.unbonding_ready_at,
        active=chain.is_active(info.node),
        min_stake=chain.training_config.min_stake(),
        node_id=chain.stake_manager.node_id_of(info.node),
        retired=chain.stake_manager.retired(info.node),
    )


def register_node(chain: ChainClient, node_key: LocalAccount, payout: str) -> Any:
    """Register the node of `node_key` with `payout` as its reward address; the sender becomes its
    operator. The node key signs a NodeKeyProof (operator, payout, nonce, deadline), so nobody
    can register a key they do not hold."""
    from protocol.types import Address

    node = checksum(node_key.address, what="the node key's address")
    payout = checksum(payout, what="--payout")
    if chain.account is None:
        raise ConfigError("registering a node needs the operator's key as the sender")
    if node_status(chain, node).registered:
        raise ConfigError(
            f"node {node} is already registered: see coloco node status --node {node}"
        )
    with explained_revert(_hints(node), "StakeManager.register"):
        return chain.register_node(
            bytes(node_key.key), Address(payout), operator=Address(chain.account.address)
        )


def stake_node(chain: ChainClient, node: str, amount: int | None = None) -> Any:
    """Stake `amount` wei for `node` (default: what is missing to reach the minimum stake)."""
    status = node_status(chain, node)
    if not status.registered:
        raise ConfigError(_hints(status.node)["NodeNotRegistered"])
    if amount is None:
        amount = max(status.min_stake - status.staked, 0)
        if amount == 0:
            raise ConfigError(
                f"node {status.node} already holds the minimum stake "
                f"({fmt_units(status.min_stake)} ETH): pass --amount to add more"
            )
    if amount <= 0:
        raise ConfigError("--amount must be more than zero")
    return _send(chain, status.node, "stake", status.node, value=amount)


def unstake_node(chain: ChainClient, node: str, amount: int) -> Any:
    """Move `amount` wei of `node`'s stake into unbonding."""
    status = node_status(chain, node)
    if not status.registered:
        raise ConfigError(_hints(status.node)["NodeNotRegistered"])
    if amount <= 0 or amount > status.staked:
        raise ConfigError(
            f"cannot unstake {fmt_units(amount)} ETH from node {status.node}: it has "
            f"{fmt_units(status.staked)} ETH staked; pass an --amount between 0 and that"
        )
    return _send(chain, status.node, "requestUnstake", status.node, amount)


def withdraw_node(chain: ChainClient, node: str) -> Any:
    """Withdraw `node`'s unbonded stake to its operator."""
    status = node_status(chain, node)
    if status.unbonding == 0:
        raise ConfigError(_hints(status.node)["NothingToWithdraw"])
    now = int(chain.w3.eth.get_block("latest")["timestamp"])
    if now < status.unbonding_ready_at:
        raise ConfigError(
            f"node {status.node}'s {fmt_units(status.unbonding)} ETH unbond until "
            f"{utc(status.unbonding_ready_at)} ({status.unbonding_ready_at - now}s from the last "
            "block): run coloco node withdraw again after that"
        )
    return _send(chain, status.node, "withdraw", status.node)


def utc(timestamp: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
