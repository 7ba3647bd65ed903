"""`coloco slash report | propose | veto | execute | status`: what a faulty node stands to lose.

report: anyone submits two attestations one node key signed for the same run and round with
different content; the StakeManager slashes a governed fraction at once and pays the sender a
share. propose: a governance proposal to slash a node (then `coloco gov vote | queue | execute`);
once executed the node's stake is frozen for the slash dispute window. veto: the guardian (or
governance) cancels a pending slash. execute: anyone applies it after the window. status: a
slash proposal's state.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from coloco_cli.common import (
    DeploymentOpt,
    KeystoreOpt,
    PasswordFileOpt,
    PrivateKeyOpt,
    RpcUrlOpt,
    console,
    fmt_units,
    load_signer,
    open_chain,
    parse_amount,
    resolve,
)
from coloco_cli.node.ops import checksum, tx_line, utc
from coloco_cli.slash.ops import (
    execute_slash,
    load_signed,
    propose_slash,
    report_equivocation,
    slash_status,
    veto_slash,
)

log = logging.getLogger(__name__)

app = typer.Typer(no_args_is_help=True)

IdOpt = Annotated[int, typer.Option("--id", help="The slash proposal id (StakeManager).")]


@app.command()
def report(
    *,
    first: Annotated[Path, typer.Option(help='JSON {"attestation": {...}, "signature": "0x.."}')],
    second: Annotated[Path, typer.Option(help="The conflicting signed attestation, same form.")],
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
) -> None:
    """Report an equivocation: slashed at once, the sender receives the reporter share.

    Example: coloco slash report --first a.json --second b.json --keystore me.json
    """
    a, b = load_signed(first), load_signed(second)
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(ep, load_signer(keystore, password_file, private_key))
    amount = report_equivocation(chain, a, b)
    console.print(
        f"node {a.attestation.node} slashed {fmt_units(amount)} ETH for equivocating in round "
        f"{a.attestation.round}"
    )


@app.command()
def propose(
    *,
    node: Annotated[str, typer.Option("--node", help="A key of the node (current or retired).")],
    amount: Annotated[str, typer.Option(help="Most to take, in ether (or '100wei').")],
    evidence: Annotated[str, typer.Option(help="What the node did; its keccak goes on chain.")],
    reporter: Annotated[
        str | None, typer.Option(help="Who receives the reporter share (default: nobody).")
    ] = None,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
) -> None:
    """Propose (through governance) to slash a node; vote, queue and execute with `coloco gov`.

    Example: coloco slash propose --node 0xHOT... --amount 0.5 --evidence "audit" --keystore h.json
    """
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(ep, load_signer(keystore, password_file, private_key))
    wei = parse_amount(amount, what="--amount")
    prop = propose_slash(
        chain,
        checksum(node, what="--node"),
        wei,
        evidence,
        checksum(reporter) if reporter else None,
    )
    console.print(f"proposal {prop.proposal_id} created: {prop.description}")
    console.print(
        f"next: coloco gov vote {prop.proposal_id} --support for; once executed the "
        "node is frozen and `coloco slash execute` applies it after the slash dispute window"
    )


@app.command()
def veto(
    *,
    slash_id: IdOpt,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
) -> None:
    """Veto a pending slash (the guardian or governance); the node's stake unfreezes.

    Example: coloco slash veto --id 1 --keystore guardian.json
    """
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(ep, load_signer(keystore, password_file, private_key))
    receipt = veto_slash(chain, slash_id)
    console.print(f"slash {slash_id} vetoed ({tx_line(receipt)})")


@app.command()
def execute(
    *,
    slash_id: IdOpt,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
) -> None:
    """Apply a pending slash after its dispute window (anyone).

    Example: coloco slash execute --id 1 --private-key 0x...
    """
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(ep, load_signer(keystore, password_file, private_key))
    amount = execute_slash(chain, slash_id)
    console.print(f"slash {slash_id} executed: {fmt_units(amount)} ETH taken")


@app.command()
def status(
    *,
    slash_id: IdOpt,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
) -> None:
    """Show a slash proposal: node id, amount, state and when it can be executed.

    Example: coloco slash status --id 1
    """
    chain = open_chain(resolve(rpc_url, None, deployment))
    st = slash_status(chain, slash_id)
    console.print(
        f"slash {st.slash_id}: node id {st.node_id}, up to {fmt_units(st.amount)} ETH, "
        f"{st.status}; executable from {utc(st.executable_at)}"
    )
