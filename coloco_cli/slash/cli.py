"""`coloco slash report | propose | veto | execute | status`: what a faulty node stands to lose.

report: anyone submits two attestations one node key signed for the same run and round with
different content; the StakeManager slashes a governed fraction at once and pays the sender a
share. propose: a governance proposal to slash a node (then `coloco gov vote | queue | execute`);
once executed the node's stake is frozen for the slash dispute window. veto: the guardian (or
governance) cancels a pending slash. execute: anyone applies it after the window. status: a
slash proposal's state. Every command takes `--json`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from coloco_cli.common import fmt_units, parse_amount
from coloco_cli.node.ops import checksum, utc
from coloco_cli.slash.ops import (
    execute_slash,
    load_signed,
    propose_slash,
    report_equivocation,
    slash_status,
    veto_slash,
)
from coloco_cli.tx import TxOptions, reads, report, send_and_report, sends, tx_hex

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

app = typer.Typer(no_args_is_help=True)

IdArg = Annotated[
    int, typer.Argument(min=1, help="The slash proposal id (StakeManager), as status shows it.")
]


@app.command("report")
@sends
def report_(
    *,
    first: Annotated[Path, typer.Option(help='JSON {"attestation": {...}, "signature": "0x.."}')],
    second: Annotated[Path, typer.Option(help="The conflicting signed attestation, same form.")],
    opts: TxOptions,
) -> None:
    """Report an equivocation: slashed at once, the sender receives the reporter share.

    Example: coloco slash report --first a.json --second b.json --account me
    """
    a, b = load_signed(first), load_signed(second)

    def send(chain: ChainClient) -> dict[str, Any]:
        return {"node": a.attestation.node, "round": a.attestation.round,
                "slashed_wei": report_equivocation(chain, a, b)}  # fmt: skip

    send_and_report(
        opts,
        send,
        lambda o: (
            f"node {o['node']} slashed {fmt_units(o['slashed_wei'])} ETH for "
            f"equivocating in round {o['round']}"
        ),
    )


@app.command()
@sends
def propose(
    *,
    node: Annotated[str, typer.Option("--node", help="A key of the node (current or retired).")],
    amount: Annotated[str, typer.Option(help="Most to take, in ether (or '100wei').")],
    evidence: Annotated[str, typer.Option(help="What the node did; its keccak goes on chain.")],
    reporter: Annotated[
        str | None, typer.Option(help="Who receives the reporter share (default: nobody).")
    ] = None,
    opts: TxOptions,
) -> None:
    """Propose (through governance) to slash a node; vote, queue and execute with `coloco gov`.

    Example: coloco slash propose --node 0xHOT... --amount 0.5 --evidence "audit" --account h
    """
    wei = parse_amount(amount, what="--amount")
    target = checksum(node, what="--node")
    share_to = checksum(reporter, what="--reporter") if reporter else None

    def send(chain: ChainClient) -> dict[str, Any]:
        prop = propose_slash(chain, target, wei, evidence, share_to)
        return {"proposal_id": str(prop.proposal_id), "description": prop.description,
                "vote_start": prop.vote_start, "vote_end": prop.vote_end}  # fmt: skip

    send_and_report(
        opts,
        send,
        lambda o: (
            f"proposal {o['proposal_id']} created: {o['description']}\n"
            f"next: coloco gov vote {o['proposal_id']} --support for; once executed the node is "
            "frozen and `coloco slash execute ID` applies it after the slash dispute window"
        ),
    )


@app.command()
@sends
def veto(slash_id: IdArg, *, opts: TxOptions) -> None:
    """Veto a pending slash (the guardian or governance); the node's stake unfreezes.

    Example: coloco slash veto 1 --account guardian
    """
    send_and_report(
        opts,
        lambda chain: {
            "slash_id": slash_id,
            "state": "vetoed",
            "tx": tx_hex(veto_slash(chain, slash_id)),
        },
        lambda o: f"slash {slash_id} vetoed (tx {o['tx']})",
    )


@app.command()
@sends
def execute(slash_id: IdArg, *, opts: TxOptions) -> None:
    """Apply a pending slash after its dispute window (anyone).

    Example: coloco slash execute 1 --account me
    """
    send_and_report(
        opts,
        lambda chain: {
            "slash_id": slash_id,
            "state": "executed",
            "taken_wei": execute_slash(chain, slash_id),
        },
        lambda o: f"slash {slash_id} executed: {fmt_units(o['taken_wei'])} ETH taken",
    )


@app.command()
@reads
def status(slash_id: IdArg, *, opts: TxOptions) -> None:
    """Show a slash proposal: node id, amount, state and when it can be executed.

    Example: coloco slash status 1
    """
    st = slash_status(opts.chain(signed=False), slash_id)
    out = {"slash_id": st.slash_id, "node_id": st.node_id, "amount_wei": st.amount,
           "state": st.status, "executable_at": st.executable_at, "reporter": st.reporter,
           "evidence_hash": st.evidence_hash}  # fmt: skip
    report(
        opts,
        out,
        f"slash {st.slash_id}: node id {st.node_id}, up to {fmt_units(st.amount)} ETH, "
        f"{st.status}; executable from {utc(st.executable_at)}",
    )
