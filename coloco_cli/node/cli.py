"""`coloco node register | stake | unstake | withdraw | status | run`: what a node operator does.

The commands parse options and print; the work is in `coloco_cli.node.ops` (which `coloco demo`
calls too). `run` is the trainer's command with the CLI's settings (`coloco_cli/node/run.py`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from coloco_cli.common import console, emit_json, fmt_units, load_signer, parse_amount
from coloco_cli.node.ops import (
    checksum,
    node_status,
    register_node,
    stake_node,
    unstake_node,
    utc,
    withdraw_node,
)
from coloco_cli.tx import TxOptions, reads, send_and_report, sends, tx_hex
from protocol.errors import ConfigError
from protocol.types import Address

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

app = typer.Typer(no_args_is_help=True)

NodeOpt = Annotated[str, typer.Option("--node", help="The node's hot signing address (0x...).")]


@app.command()
@sends
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
    opts: TxOptions,
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

    def send(chain: ChainClient) -> dict[str, Any]:
        receipt = register_node(chain, node_key, payout)
        node_id = chain.stake_manager.node_id_of(Address(node_key.address))
        return {"node": node_key.address, "node_id": node_id, "payout": checksum(payout),
                "tx": tx_hex(receipt)}  # fmt: skip

    send_and_report(
        opts,
        send,
        lambda o: (
            f"registered node {o['node']} (node id {o['node_id']}) -> payout "
            f"{o['payout']} (tx {o['tx']})\nnext: coloco node stake --node {o['node']}"
        ),
    )


@app.command()
@sends
def stake(
    *,
    node: NodeOpt,
    amount: Annotated[
        str | None, typer.Option(help="Amount in ether (e.g. 1.5) or wei (100wei); default: min.")
    ] = None,
    opts: TxOptions,
) -> None:
    """Stake native currency for a registered node.

    Example: coloco node stake --node 0xHOT... --amount 1 --keystore operator.json
    """
    wei = parse_amount(amount, what="--amount") if amount is not None else None

    def send(chain: ChainClient) -> dict[str, Any]:
        receipt = stake_node(chain, node, wei)
        st = node_status(chain, node)
        return {"node": st.node, "staked": st.staked, "active": st.active, "tx": tx_hex(receipt)}

    send_and_report(
        opts,
        send,
        lambda o: (
            f"staked for {o['node']}: total {fmt_units(o['staked'])} ETH "
            f"({'active' if o['active'] else 'not active yet'}; tx {o['tx']})"
        ),
    )


@app.command()
@sends
def unstake(
    *,
    node: NodeOpt,
    amount: Annotated[str, typer.Option(help="Amount in ether (e.g. 0.5) or wei (100wei).")],
    opts: TxOptions,
) -> None:
    """Start unbonding part of a node's stake (withdraw it after the unbonding delay).

    Example: coloco node unstake --node 0xHOT... --amount 0.5 --keystore operator.json
    """
    wei = parse_amount(amount, what="--amount")

    def send(chain: ChainClient) -> dict[str, Any]:
        receipt = unstake_node(chain, node, wei)
        st = node_status(chain, node)
        return {"node": st.node, "unbonding": st.unbonding, "ready_at": st.unbonding_ready_at,
                "tx": tx_hex(receipt)}  # fmt: skip

    send_and_report(
        opts,
        send,
        lambda o: (
            f"unbonding {fmt_units(o['unbonding'])} ETH for {o['node']}, withdrawable from "
            f"{utc(o['ready_at'])} (tx {o['tx']})"
        ),
    )


@app.command()
@sends
def withdraw(*, node: NodeOpt, opts: TxOptions) -> None:
    """Withdraw a node's unbonded stake to its operator once the delay has passed.

    Example: coloco node withdraw --node 0xHOT... --keystore operator.json
    """
    send_and_report(
        opts,
        lambda chain: {"node": checksum(node), "tx": tx_hex(withdraw_node(chain, node))},
        lambda o: f"withdrawn for {o['node']} (tx {o['tx']})",
    )


@app.command()
@reads
def status(
    *,
    node: NodeOpt,
    checkpoint_dir: Annotated[
        Path | None,
        typer.Option(help="The node's state folder (its journal); default: .coloco/checkpoints."),
    ] = None,
    opts: TxOptions,
) -> None:
    """Show a node's registration, its stable node id, stake, (if the ledger answers) the
    rounds it worked, and the rounds its journal holds unsent or lost.

    Example: coloco node status --node 0xHOT...
    """
    st = node_status(opts.chain(signed=False), node)
    ledger_view = _ledger_node(opts.endpoints().ledger_url, st.node)
    unsent, lost = _journal(checkpoint_dir, st.node)
    if opts.json_out:
        view = ledger_view or {}
        emit_json({**st.__dict__, "registered": st.registered,
                   "rounds_worked": view.get("rounds_worked"),
                   "rejections": view.get("rejections"),
                   "missed_rounds": view.get("missed_rounds"),
                   "unsent_rounds": unsent, "lost_rounds": lost})  # fmt: skip
        return
    table = Table(title=f"node {st.node}", show_header=False)
    table.add_row("registered", "yes" if st.registered else "no")
    id_note = " (retired key: rotated away from)" if st.retired else ""
    table.add_row("node id", (str(st.node_id) if st.node_id else "-") + id_note)
    table.add_row("operator", st.operator)
    table.add_row("payout", st.payout)
    table.add_row("staked", f"{fmt_units(st.staked)} ETH (minimum {fmt_units(st.min_stake)})")
    ready = f" (withdrawable from {utc(st.unbonding_ready_at)})" if st.unbonding else ""
    table.add_row("unbonding", f"{fmt_units(st.unbonding)} ETH{ready}")
    table.add_row("active", "[green]yes[/]" if st.active else "[red]no[/]")
    if ledger_view is not None:
        for key in ("rounds_worked", "rejections"):
            if key in ledger_view:
                value = ledger_view[key]
                table.add_row(
                    key.replace("_", " "), str(len(value) if isinstance(value, list) else value)
                )
        missed = ledger_view.get("missed_rounds") or []
        table.add_row(
            "missed rounds (ledger)",
            ", ".join(f"{m['round']}" for m in missed) or "none",  # joined, never attested
        )
    table.add_row("unsent rounds", ", ".join(map(str, unsent)) or "none")
    table.add_row("lost rounds", "; ".join(f"{r} ({why})" for r, why in lost.items()) or "none")
    console.print(table)
    if unsent:
        console.print(
            f"rounds {unsent} are signed and not yet acknowledged by the ledger: they are sent "
            "first when the node runs again with the same --checkpoint-dir"
        )
    if not st.registered:
        console.print(f"next: coloco node register --node {st.node} --payout 0x...")
    elif not st.active:
        missing = max(st.min_stake - st.staked, 0)
        console.print(
            f"node {st.node} is not staked enough to train: run coloco node stake --node {st.node} "
            f"--amount {fmt_units(missing)}"
        )


def _journal(folder: Path | None, node: str) -> tuple[list[int], dict[int, str]]:
    """(unsent rounds, {lost round: the ledger's reason}) from the journals of `node` under
    `folder` (a node's state folder, or a tree of them: `coloco node run` keeps one per run and
    key under .coloco/checkpoints)."""
    from trainer.round.journal import FOLDER, lost_rounds, node_of, unsent_rounds

    root = folder if folder is not None else Path(".coloco") / "checkpoints"
    unsent: list[int] = []
    lost: dict[int, str] = {}
    for journal in sorted(root.glob(f"**/{FOLDER}")) if root.is_dir() else []:
        state = journal.parent
        if (node_of(state) or "").lower() != node.lower():
            continue
        unsent += unsent_rounds(state)
        lost |= lost_rounds(state)
    return sorted(unsent), dict(sorted(lost.items()))


@app.command()
@reads
def doctor(
    *,
    node: Annotated[
        str | None, typer.Option("--node", help="The node's hot signing address (0x...).")
    ] = None,
    rendezvous: Annotated[
        str, typer.Option(help="HOST:PORT of the run's rendezvous.")
    ] = "127.0.0.1:29400",
    data: Annotated[
        Path | None, typer.Option(help="The node's data folder (default: the shipped corpus).")
    ] = None,
    model: Annotated[str, typer.Option(help="Model preset the node will train.")] = "tiny",
    checkpoint_dir: Annotated[
        Path, typer.Option(help="Where the node will write checkpoints (its free disk).")
    ] = Path(".coloco/checkpoints"),
    opts: TxOptions,
) -> None:
    """Check a node before it joins: chain, stake and registration, ledger, rendezvous, clock
    skew, data fingerprint against the run, free disk and memory. Exit 1 if any check fails;
    each failed check names its fix.

    Example: coloco node doctor --node 0xHOT... --rendezvous 127.0.0.1:29400
    """
    from coloco_cli.node.doctor import DoctorInputs, as_json, diagnose

    inputs = DoctorInputs(opts.endpoints(), node, rendezvous, data, model, checkpoint_dir)
    checks = diagnose(inputs)
    if opts.json_out:
        emit_json(as_json(checks))
    else:
        for c in checks:
            mark = "[green]ok[/]  " if c.ok else "[red]FAIL[/]"
            console.print(f"{mark} {c.name:<10} {c.detail}", highlight=False, soft_wrap=True)
            if not c.ok:
                console.print(f"       fix: {c.fix}", highlight=False, soft_wrap=True)
        failed = [c.name for c in checks if not c.ok]
        console.print(f"{len(checks) - len(failed)} of {len(checks)} checks passed"
                      + (f"; failed: {', '.join(failed)}" if failed else ""))  # fmt: skip
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


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
