"""`coloco gov delegate | propose | vote | queue | execute | status | list`: token holders.

The commands parse options and print; the work is in `coloco_cli.gov.ops` (which `coloco demo`
calls too).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from coloco_cli.common import (
    AccountOpt,
    DeploymentOpt,
    JsonOpt,
    KeystoreOpt,
    PasswordFileOpt,
    PrivateKeyOpt,
    RpcUrlOpt,
    console,
    emit_json,
    fmt_units,
    load_signer,
    open_chain,
    resolve,
)
from coloco_cli.gov.ops import (
    cast_vote,
    delegate_votes,
    execute_proposal,
    find_proposal,
    list_proposals,
    parse_proposal_id,
    proposal_state,
    propose_change,
    queue_proposal,
)
from coloco_cli.node.ops import checksum
from coloco_cli.tx import ConfirmationsOpt, GasLimitOpt, NoWaitOpt, TxOptions

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

app = typer.Typer(no_args_is_help=True)

ProposalArg = Annotated[
    str, typer.Argument(help="Proposal id (decimal or 0x hex), as `coloco gov list` shows it.")
]


# --- commands ------------------------------------------------------------------------------------


def _chain(
    rpc_url: str | None,
    deployment: Any,
    sender: tuple[Any, Any, str | None, str | None] | None = None,
    tx: TxOptions | None = None,
) -> tuple[ChainClient, int]:
    """A chain client (sending as `sender` = keystore, password file, key, account name)."""
    ep = resolve(rpc_url, None, deployment)
    account = load_signer(*sender) if sender is not None else None
    return open_chain(ep, account, tx), int(ep.deployment().deployment_block)


@app.command()
def delegate(
    *,
    to: Annotated[
        str | None, typer.Option(help="Delegate to this address (default: yourself).")
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
    """Delegate your ModelShareToken votes (needed once before your balance counts as votes).

    Example: coloco gov delegate --keystore holder.json
    """
    chain, _ = _chain(
        rpc_url,
        deployment,
        (keystore, password_file, private_key, account),
        TxOptions(gas_limit, confirmations, no_wait),
    )
    delegate_votes(chain, to)
    votes = int(
        chain.call("ModelShareToken", "getVotes", checksum(to) if to else chain.account_address)
    )
    if json_out:
        emit_json({"delegate": to or chain.account_address, "votes": votes})
        return
    console.print(f"delegated; votes of the delegate now {fmt_units(votes)} CMS")


@app.command()
def propose(
    *,
    set_: Annotated[
        list[str],
        typer.Option("--set", help="NAME=VALUE, e.g. inner-steps=30, outer-lr=0.5 (repeatable)."),
    ],
    description: Annotated[str | None, typer.Option(help="Proposal text.")] = None,
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
    """Propose a TrainingConfig change by name.

    Example: coloco gov propose --set inner-steps=30 --description "shorter rounds"
    """
    chain, _ = _chain(
        rpc_url,
        deployment,
        (keystore, password_file, private_key, account),
        TxOptions(gas_limit, confirmations, no_wait),
    )
    prop = propose_change(chain, set_, description)
    if json_out:
        emit_json(
            {"proposal_id": str(prop.proposal_id), "description": prop.description,
             "vote_start": prop.vote_start, "vote_end": prop.vote_end}
        )  # fmt: skip
        return
    console.print(f"proposal [bold]{prop.proposal_id}[/] created: {prop.description}")
    console.print(f"voting opens after block {prop.vote_start}, ends at block {prop.vote_end}")
    console.print(f"next: coloco gov vote {prop.proposal_id} --support for|against|abstain")


@app.command()
def vote(
    *,
    proposal: ProposalArg,
    support: Annotated[
        str, typer.Option(help="for, against or abstain (no default: say what you mean).")
    ],
    reason: Annotated[str, typer.Option(help="Optional reason, stored on chain.")] = "",
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
    """Vote on an Active proposal.

    Example: coloco gov vote 1234... --support for --keystore holder.json
    """
    chain, _ = _chain(
        rpc_url,
        deployment,
        (keystore, password_file, private_key, account),
        TxOptions(gas_limit, confirmations, no_wait),
    )
    pid = parse_proposal_id(proposal)
    cast_vote(chain, pid, support.lower(), reason)
    against, for_, abstain = chain.call("ModelGovernor", "proposalVotes", pid)
    if json_out:
        emit_json({"proposal_id": str(pid), "support": support.lower(), "for": for_,
                   "against": against, "abstain": abstain})  # fmt: skip
        return
    console.print(
        f"voted {support} on {pid}: for {fmt_units(for_)}, against {fmt_units(against)}, "
        f"abstain {fmt_units(abstain)}"
    )


@app.command()
def queue(
    *,
    proposal: ProposalArg,
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
    """Queue a Succeeded proposal in the Timelock.

    Example: coloco gov queue 1234... --keystore holder.json
    """
    chain, start = _chain(
        rpc_url,
        deployment,
        (keystore, password_file, private_key, account),
        TxOptions(gas_limit, confirmations, no_wait),
    )
    pid = parse_proposal_id(proposal)
    queue_proposal(chain, pid, start)
    eta = int(chain.call("ModelGovernor", "proposalEta", pid))
    if json_out:
        emit_json({"proposal_id": str(pid), "state": "Queued", "eta": eta})
        return
    console.print(f"queued {pid}; executable from timestamp {eta}")


@app.command()
def execute(
    *,
    proposal: ProposalArg,
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
    """Execute a Queued proposal after the Timelock delay: TrainingConfig changes now.

    Example: coloco gov execute 1234... --keystore holder.json
    """
    chain, start = _chain(
        rpc_url,
        deployment,
        (keystore, password_file, private_key, account),
        TxOptions(gas_limit, confirmations, no_wait),
    )
    pid = parse_proposal_id(proposal)
    execute_proposal(chain, pid, start)
    version = int(chain.call("TrainingConfig", "version"))
    if json_out:
        emit_json({"proposal_id": str(pid), "state": "Executed", "config_version": version})
        return
    console.print(f"executed {pid}; TrainingConfig version is now {version}")


@app.command()
def status(
    proposal: ProposalArg,
    *,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show a proposal's state, votes and deadlines.

    Example: coloco gov status 1234...
    """
    chain, start = _chain(rpc_url, deployment)
    pid = parse_proposal_id(proposal)
    p = find_proposal(chain, pid, start)
    against, for_, abstain = chain.call("ModelGovernor", "proposalVotes", pid)
    if json_out:
        emit_json({"proposal_id": str(pid), "description": p.description,
                   "state": proposal_state(chain, pid), "for": for_, "against": against,
                   "abstain": abstain, "vote_start": p.vote_start, "vote_end": p.vote_end,
                   "block": chain.block_number()})  # fmt: skip
        return
    table = Table(title=f"proposal {pid}", show_header=False)
    table.add_row("description", p.description)
    table.add_row("state", proposal_state(chain, pid))
    table.add_row(
        "votes",
        f"for {fmt_units(for_)} / against {fmt_units(against)} / abstain {fmt_units(abstain)}",
    )
    now = int(chain.w3.eth.get_block("latest")["timestamp"])  # the governor's clock: seconds
    table.add_row("voting", f"unix time {p.vote_start}..{p.vote_end} (now {now})")
    table.add_row(
        "quorum",
        fmt_units(int(chain.call("ModelGovernor", "quorum", p.vote_start)))
        if now > p.vote_start
        else "set at vote start",
    )
    console.print(table)


@app.command("list")
def list_(
    *, rpc_url: RpcUrlOpt = None, deployment: DeploymentOpt = None, json_out: JsonOpt = False
) -> None:
    """List every proposal with its state.

    Example: coloco gov list
    """
    chain, start = _chain(rpc_url, deployment)
    if json_out:
        rows = []
        for p in list_proposals(chain, start):
            against, for_, abstain = chain.call("ModelGovernor", "proposalVotes", p.proposal_id)
            rows.append({"proposal_id": str(p.proposal_id), "description": p.description,
                         "state": proposal_state(chain, p.proposal_id), "for": for_,
                         "against": against, "abstain": abstain})  # fmt: skip
        emit_json({"proposals": rows})
        return
    table = Table(title="proposals")
    for col in ("id", "state", "for", "against", "description"):
        table.add_column(col)
    for p in list_proposals(chain, start):
        against, for_, _ = chain.call("ModelGovernor", "proposalVotes", p.proposal_id)
        table.add_row(
            str(p.proposal_id), proposal_state(chain, p.proposal_id), fmt_units(for_),
            fmt_units(against), p.description,
        )  # fmt: skip
    console.print(table)
