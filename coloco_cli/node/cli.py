"""`coloco node register | stake | unstake | withdraw | status | run`: what a node operator does.

The commands parse options and print; the work is in `coloco_cli.node.ops` (which `coloco demo`
calls too). `run` is the trainer's command (`trainer/cli.py: run_command`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from coloco_cli.common import (
    AccountOpt,
    DeploymentOpt,
    JsonOpt,
    KeystoreOpt,
    LedgerUrlOpt,
    PasswordFileOpt,
    PrivateKeyOpt,
    RpcUrlOpt,
    console,
    emit_json,
    fmt_units,
    load_signer,
    open_chain,
    parse_amount,
    resolve,
)
from coloco_cli.node.ops import (
    checksum,
    node_status,
    register_node,
    stake_node,
    tx_hex,
    tx_line,
    unstake_node,
    utc,
    withdraw_node,
)
from coloco_cli.tx import ConfirmationsOpt, GasLimitOpt, NoWaitOpt, TxOptions
from protocol.errors import ConfigError

log = logging.getLogger(__name__)

app = typer.Typer(no_args_is_help=True)

NodeOpt = Annotated[str, typer.Option("--node", help="The node's hot signing address (0x...).")]


@app.command()
def register(
    *,
    payout: Annotated[str, typer.Option(help="Cold address that receives the node's rewards.")],
    node_keystore: Annotated[
        Path | None,
        typer.Option(help="The node's hot key (keystore): it signs its proof of possession."),
    ] = None,
    node_password_file: Annotated[
        Path | None, typer.Option(help="Password file of --node-keystore.")
    ] = None,
    node_private_key: Annotated[
        str | None, typer.Option(help="The node's hot key as raw hex (devnets only).")
    ] = None,
    node_account: Annotated[
        str | None, typer.Option(help="The node's hot key as a named account (coloco keys).")
    ] = None,
    node: Annotated[
        str | None, typer.Option("--node", help="Expected node address (checked against the key).")
    ] = None,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
    account: AccountOpt = None,
    gas_limit: GasLimitOpt = None,
    confirmations: ConfirmationsOpt = 1,
    no_wait: NoWaitOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Register a node key with a payout address; the sender becomes the operator. The node key
    signs an EIP-712 proof (operator, payout, nonce, deadline), so nobody can register a key it
    does not hold.

    Example: coloco node register --node-keystore node.json --payout 0xCOLD... --keystore op.json
    """
    if node_keystore is None and node_private_key is None and node_account is None:
        raise ConfigError(
            "registering needs the node's own key to sign its proof of possession: pass "
            "--node-account NAME, --node-keystore PATH (or --node-private-key 0x... on a devnet)"
        )
    node_key = load_signer(node_keystore, node_password_file, node_private_key, node_account)
    if node is not None and checksum(node) != node_key.address:
        raise ConfigError(f"--node {node} is not the address of the node key ({node_key.address})")
    node = node_key.address
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(
        ep,
        load_signer(keystore, password_file, private_key, account),
        TxOptions(gas_limit, confirmations, no_wait),
    )
    receipt = register_node(chain, node_key, payout)
    if json_out:
        emit_json({"node": checksum(node), "payout": checksum(payout), "tx": tx_hex(receipt)})
        return
    console.print(
        f"registered node {checksum(node)} -> payout {checksum(payout)} ({tx_line(receipt)})"
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
    account: AccountOpt = None,
    gas_limit: GasLimitOpt = None,
    confirmations: ConfirmationsOpt = 1,
    no_wait: NoWaitOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Stake native currency for a registered node.

    Example: coloco node stake --node 0xHOT... --amount 1 --keystore operator.json
    """
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(
        ep,
        load_signer(keystore, password_file, private_key, account),
        TxOptions(gas_limit, confirmations, no_wait),
    )
    wei = parse_amount(amount, what="--amount") if amount is not None else None
    receipt = stake_node(chain, node, wei)
    status = node_status(chain, node)
    if json_out:
        emit_json({"node": status.node, "staked": status.staked, "active": status.active,
                   "tx": tx_hex(receipt)})  # fmt: skip
        return
    console.print(
        f"staked for {status.node}: total {fmt_units(status.staked)} ETH "
        f"({'active' if status.active else 'not active yet'}; {tx_line(receipt)})"
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
    account: AccountOpt = None,
    gas_limit: GasLimitOpt = None,
    confirmations: ConfirmationsOpt = 1,
    no_wait: NoWaitOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Start unbonding part of a node's stake (withdraw it after the unbonding delay).

    Example: coloco node unstake --node 0xHOT... --amount 0.5 --keystore operator.json
    """
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(
        ep,
        load_signer(keystore, password_file, private_key, account),
        TxOptions(gas_limit, confirmations, no_wait),
    )
    receipt = unstake_node(chain, node, parse_amount(amount, what="--amount"))
    status = node_status(chain, node)
    if json_out:
        emit_json({"node": status.node, "unbonding": status.unbonding,
                   "ready_at": status.unbonding_ready_at, "tx": tx_hex(receipt)})  # fmt: skip
        return
    console.print(
        f"unbonding {fmt_units(status.unbonding)} ETH for {status.node}, withdrawable from "
        f"{utc(status.unbonding_ready_at)} ({tx_line(receipt)})"
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
    account: AccountOpt = None,
    gas_limit: GasLimitOpt = None,
    confirmations: ConfirmationsOpt = 1,
    no_wait: NoWaitOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Withdraw a node's unbonded stake to its operator once the delay has passed.

    Example: coloco node withdraw --node 0xHOT... --keystore operator.json
    """
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(
        ep,
        load_signer(keystore, password_file, private_key, account),
        TxOptions(gas_limit, confirmations, no_wait),
    )
    receipt = withdraw_node(chain, node)
    if json_out:
        emit_json({"node": checksum(node), "tx": tx_hex(receipt)})
        return
    console.print(f"withdrawn for {checksum(node)} ({tx_line(receipt)})")


@app.command()
def status(
    *,
    node: NodeOpt,
    rpc_url: RpcUrlOpt = None,
    ledger_url: LedgerUrlOpt = None,
    deployment: DeploymentOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show a node's registration, stake, and (if the ledger answers) the rounds it worked.

    Example: coloco node status --node 0xHOT...
    """
    ep = resolve(rpc_url, ledger_url, deployment)
    st = node_status(open_chain(ep), node)
    if json_out:
        view = _ledger_node(ep.ledger_url, st.node) or {}
        emit_json({**st.__dict__, "registered": st.registered,
                   "rounds_worked": view.get("rounds_worked"),
                   "rejections": view.get("rejections")})  # fmt: skip
        return
    table = Table(title=f"node {st.node}", show_header=False)
    table.add_row("registered", "yes" if st.registered else "no")
    table.add_row("operator", st.operator)
    table.add_row("payout", st.payout)
    table.add_row("staked", f"{fmt_units(st.staked)} ETH (minimum {fmt_units(st.min_stake)})")
    ready = f" (withdrawable from {utc(st.unbonding_ready_at)})" if st.unbonding else ""
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
        from coloco_cli.node.run import build_run_command

        command = build_run_command()
    except ModuleNotFoundError as exc:  # the trainer is not installed
        if exc.name not in {"trainer", "trainer.cli"}:
            raise
        log.debug("coloco node run unavailable: %s", exc)
        return
    app.command(
        "run", help="Run a trainer node: DiLoCo rounds, signed attestations to the ledger."
    )(command)


_register_run()
