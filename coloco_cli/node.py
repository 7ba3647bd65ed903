"""`coloco node register | stake | unstake | withdraw | status | run`: what a node operator does.

A node is its hot signing key (`--node`, an address); the operator (the sender of these
transactions) registers it with a cold payout address, stakes for it in native currency, and
later unstakes (an unbonding delay) and withdraws. The functions below the commands are the
same code paths `coloco demo` uses.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from coloco_cli.common import (
    DeploymentOpt,
    KeystoreOpt,
    LedgerUrlOpt,
    PasswordFileOpt,
    PrivateKeyOpt,
    RpcUrlOpt,
    console,
    fmt_units,
    load_signer,
    open_chain,
    parse_amount,
    resolve,
    revert_hint,
)
from protocol.errors import ConfigError, ContractRevertError

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

app = typer.Typer(no_args_is_help=True)

ZERO_ADDRESS = "0x0000000000000000000000000000000000000000"

NodeOpt = Annotated[str, typer.Option("--node", help="The node's hot signing address (0x...).")]


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
    }


def checksum(address: str, *, what: str = "address") -> str:
    """The checksummed form of `address`, or a ConfigError naming `what`."""
    from eth_utils.address import is_address, to_checksum_address

    if not isinstance(address, str) or not is_address(address):
        raise ConfigError(f"{what} {address!r} is not a 0x-prefixed 20-byte address")
    return str(to_checksum_address(address))


def _send(chain: ChainClient, node: str, fn: str, *args: Any, value: int = 0) -> Any:
    try:
        return chain.transact("StakeManager", fn, *args, value=value)
    except ContractRevertError as exc:
        raise ContractRevertError(
            f"StakeManager.{fn} reverted: {revert_hint(exc, _hints(node))}",
            error_name=exc.error_name,
            error_args=exc.error_args,
        ) from exc


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
        min_stake=int(chain.call("TrainingConfig", "minStake")),
    )


def register_node(chain: ChainClient, node: str, payout: str) -> Any:
    """Register `node` with `payout` as its reward address; the sender becomes its operator."""
    node = checksum(node, what="--node")
    payout = checksum(payout, what="--payout")
    if node_status(chain, node).registered:
        raise ConfigError(
            f"node {node} is already registered: see coloco node status --node {node}"
        )
    return _send(chain, node, "register", node, payout)


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
            f"{_utc(status.unbonding_ready_at)} ({status.unbonding_ready_at - now}s from the last "
            "block): run coloco node withdraw again after that"
        )
    return _send(chain, status.node, "withdraw", status.node)


def _utc(timestamp: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _tx_line(receipt: Any) -> str:
    """'tx 0x…' for a web3 receipt."""
    try:
        tx = receipt["transactionHash"]
    except (KeyError, TypeError):
        return "sent"
    text = tx.hex() if hasattr(tx, "hex") else str(tx)
    return f"tx {text if text.startswith('0x') else '0x' + text}"


@app.command()
def register(
    *,
    node: NodeOpt,
    payout: Annotated[str, typer.Option(help="Cold address that receives the node's rewards.")],
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
) -> None:
    """Register a node key with a payout address; the sender becomes the operator.

    Example: coloco node register --node 0xHOT... --payout 0xCOLD... --keystore operator.json
    """
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(ep, load_signer(keystore, password_file, private_key))
    receipt = register_node(chain, node, payout)
    console.print(
        f"registered node {checksum(node)} -> payout {checksum(payout)} ({_tx_line(receipt)})"
    )
    console.print(f"next: coloco node stake --node {checksum(node)}")


@app.command()
def stake(
    *,
    node: NodeOpt,
    amount: Annotated[
        str | None, typer.Option(help="Amount in ether (e.g. 1.5) or wei (100wei); default: min.")
    ] = None,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
) -> None:
    """Stake native currency for a registered node.

    Example: coloco node stake --node 0xHOT... --amount 1 --keystore operator.json
    """
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(ep, load_signer(keystore, password_file, private_key))
    wei = parse_amount(amount, what="--amount") if amount is not None else None
    receipt = stake_node(chain, node, wei)
    status = node_status(chain, node)
    console.print(
        f"staked for {status.node}: total {fmt_units(status.staked)} ETH "
        f"({'active' if status.active else 'not active yet'}; {_tx_line(receipt)})"
    )


@app.command()
def unstake(
    *,
    node: NodeOpt,
    amount: Annotated[str, typer.Option(help="Amount in ether (e.g. 0.5) or wei (100wei).")],
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
) -> None:
    """Start unbonding part of a node's stake (withdraw it after the unbonding delay).

    Example: coloco node unstake --node 0xHOT... --amount 0.5 --keystore operator.json
    """
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(ep, load_signer(keystore, password_file, private_key))
    receipt = unstake_node(chain, node, parse_amount(amount, what="--amount"))
    status = node_status(chain, node)
    console.print(
        f"unbonding {fmt_units(status.unbonding)} ETH for {status.node}, withdrawable from "
        f"{_utc(status.unbonding_ready_at)} ({_tx_line(receipt)})"
    )


@app.command()
def withdraw(
    *,
    node: NodeOpt,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
) -> None:
    """Withdraw a node's unbonded stake to its operator once the delay has passed.

    Example: coloco node withdraw --node 0xHOT... --keystore operator.json
    """
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(ep, load_signer(keystore, password_file, private_key))
    receipt = withdraw_node(chain, node)
    console.print(f"withdrawn for {checksum(node)} ({_tx_line(receipt)})")


@app.command()
def status(
    *,
    node: NodeOpt,
    rpc_url: RpcUrlOpt = None,
    ledger_url: LedgerUrlOpt = None,
    deployment: DeploymentOpt = None,
) -> None:
    """Show a node's registration, stake, and (if the ledger answers) the rounds it worked.

    Example: coloco node status --node 0xHOT...
    """
    ep = resolve(rpc_url, ledger_url, deployment)
    st = node_status(open_chain(ep), node)
    table = Table(title=f"node {st.node}", show_header=False)
    table.add_row("registered", "yes" if st.registered else "no")
    table.add_row("operator", st.operator)
    table.add_row("payout", st.payout)
    table.add_row("staked", f"{fmt_units(st.staked)} ETH (minimum {fmt_units(st.min_stake)})")
    ready = f" (withdrawable from {_utc(st.unbonding_ready_at)})" if st.unbonding else ""
    table.add_row("unbonding", f"{fmt_units(st.unbonding)} ETH{ready}")
    table.add_row("active", "[green]yes[/]" if st.active else "[red]no[/]")
    ledger_view = _ledger_node(ep.ledger_url, st.node)
    if ledger_view is not None:
        for key in ("rounds_worked", "rejections"):
            if key in ledger_view:
                value = ledger_view[key]
                table.add_row(
                    key.replace("_", " "), str(len(value) if isinstance(value, list) else value)
                )
    console.print(table)
    if not st.registered:
        console.print(f"next: coloco node register --node {st.node} --payout 0x...")
    elif not st.active:
        missing = max(st.min_stake - st.staked, 0)
        console.print(
            f"node {st.node} is not staked enough to train: run coloco node stake --node {st.node} "
            f"--amount {fmt_units(missing)}"
        )


def _ledger_node(ledger_url: str, node: str) -> dict[str, Any] | None:
    """The ledger's view of `node`, or None when the ledger does not answer (status still works)."""
    import httpx

    try:
        resp = httpx.get(f"{ledger_url}/v1/nodes/{node}", timeout=3.0)
    except httpx.HTTPError:
        log.debug("ledger %s not reachable; showing on-chain state only", ledger_url)
        return None
    if resp.status_code != 200:
        return None
    data = resp.json()
    return data if isinstance(data, dict) else None


def _register_run() -> None:
    try:
        from trainer.cli import run_command
    except ModuleNotFoundError as exc:  # the trainer is not in this checkout yet
        if exc.name not in {"trainer", "trainer.cli"}:
            raise
        log.debug("coloco node run unavailable: %s", exc)
        return
    app.command(
        "run", help="Run a trainer node: DiLoCo rounds, signed attestations to the ledger."
    )(run_command)


_register_run()
