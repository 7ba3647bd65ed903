"""`coloco gov delegate | propose | vote | queue | execute | status | list`: token holders.

The commands parse options and print; the work is in `coloco_cli.gov.ops` (which `coloco demo`
calls too).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from coloco_cli.common import console, emit_json, fmt_units
from coloco_cli.gov.ops import (
    cast_vote,
    chain_now,
    delegate_votes,
    execute_proposal,
    find_proposal,
    list_proposals,
    proposal_state,
    propose_change,
    queue_proposal,
    resolve_proposal_id,
    sender_of,
    support_code,
    when,
)
from coloco_cli.node.ops import checksum, utc
from coloco_cli.tx import TxOptions, reads, send_and_report, sends
from protocol.types import Address
from reference.governed import describe_actions

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

app = typer.Typer(no_args_is_help=True)

ProposalArg = Annotated[
    str,
    typer.Argument(
        help="Proposal id (decimal or 0x hex) as `coloco gov list` shows it, or a unique "
        "prefix of its digits."
    ),
]


@app.command()
@sends
def delegate(
    *,
    to: Annotated[
        str | None, typer.Option(help="Delegate to this address (default: yourself).")
    ] = None,
    opts: TxOptions,
) -> None:
    """Delegate your ModelShareToken votes (needed once before your balance counts as votes).

    Example: coloco gov delegate --account holder
    """

    def send(chain: ChainClient) -> dict[str, Any]:
        delegate_votes(chain, to)
        who = checksum(to) if to else sender_of(chain)
        return {"delegate": who, "votes": int(chain.model_share_token.get_votes(Address(who)))}

    send_and_report(
        opts, send, lambda o: f"delegated; votes of the delegate now {fmt_units(o['votes'])} CMS"
    )


@app.command()
@sends
def propose(
    *,
    set_: Annotated[
        list[str],
        typer.Option("--set", help="NAME=VALUE, e.g. inner-steps=30, outer-lr=0.5 (repeatable)."),
    ],
    description: Annotated[str | None, typer.Option(help="Proposal text.")] = None,
    force: Annotated[
        bool,
        typer.Option(
            help="Propose even a value TrainingConfig would revert or one with a warned "
            "consequence (nodes dropping below a new min-stake, a zero reward)."
        ),
    ] = False,
    opts: TxOptions,
) -> None:
    """Propose a TrainingConfig change by name.

    Each value is checked first against the range the contract allows (read from the chain) and
    for consequences (nodes below a new min-stake, a zero reward): refused before any
    transaction unless --force.

    Example: coloco gov propose --set inner-steps=30 --description "shorter rounds"
    """

    def send(chain: ChainClient) -> dict[str, Any]:
        prop = propose_change(chain, set_, description, force=force)
        now = chain_now(chain)
        return {"proposal_id": str(prop.proposal_id), "description": prop.description,
                "vote_start": prop.vote_start, "vote_end": prop.vote_end,
                "opens": when(prop.vote_start, now, future="opens", past="opened"),
                "ends": when(prop.vote_end, now, future="ends", past="ended")}  # fmt: skip

    send_and_report(
        opts,
        send,
        lambda o: (
            f"proposal [bold]{o['proposal_id']}[/] created: {o['description']}\n"
            f"voting opens after {o['opens']}, ends {o['ends']}\n"
            f"next: coloco gov vote {o['proposal_id']} --support for|against|abstain"
        ),
    )


@app.command()
@sends
def vote(
    proposal: ProposalArg,
    *,
    support: Annotated[
        str, typer.Option(help="for, against or abstain (no default: say what you mean).")
    ],
    reason: Annotated[str, typer.Option(help="Optional reason, stored on chain.")] = "",
    force: Annotated[
        bool, typer.Option(help="Vote even with 0 voting power (it counts 0 and uses your vote).")
    ] = False,
    opts: TxOptions,
) -> None:
    """Vote on an Active proposal; refused when your vote would count 0 (delegate first).

    Example: coloco gov vote 1234... --support for --account holder
    """
    support_code(support.lower())

    def send(chain: ChainClient) -> dict[str, Any]:
        pid = resolve_proposal_id(chain, proposal)
        cast_vote(chain, pid, support.lower(), reason, force=force)
        v = chain.model_governor.proposal_votes(pid)
        against, for_, abstain = v.against_votes, v.for_votes, v.abstain_votes
        return {"proposal_id": str(pid), "support": support.lower(), "for": for_,
                "against": against, "abstain": abstain}  # fmt: skip

    send_and_report(
        opts,
        send,
        lambda o: (
            f"voted {support} on {o['proposal_id']}: for {fmt_units(o['for'])}, against "
            f"{fmt_units(o['against'])}, abstain {fmt_units(o['abstain'])}"
        ),
    )


@app.command()
@sends
def queue(proposal: ProposalArg, *, opts: TxOptions) -> None:
    """Queue a Succeeded proposal in the Timelock.

    Example: coloco gov queue 1234... --account holder
    """

    def send(chain: ChainClient) -> dict[str, Any]:
        pid = resolve_proposal_id(chain, proposal)
        queue_proposal(chain, pid, int(chain.deployment.deployment_block))
        eta = chain.model_governor.proposal_eta(pid)
        return {"proposal_id": str(pid), "state": "Queued", "eta": eta,
                "executable": when(eta, chain_now(chain), future="in", past="since")}  # fmt: skip

    send_and_report(
        opts, send, lambda o: f"queued {o['proposal_id']}; executable from {o['executable']}"
    )


@app.command()
@sends
def execute(proposal: ProposalArg, *, opts: TxOptions) -> None:
    """Execute a Queued proposal after the Timelock delay: TrainingConfig changes now.

    Example: coloco gov execute 1234... --account holder
    """

    def send(chain: ChainClient) -> dict[str, Any]:
        pid = resolve_proposal_id(chain, proposal)
        execute_proposal(chain, pid, int(chain.deployment.deployment_block))
        version = chain.training_config.version()
        return {"proposal_id": str(pid), "state": "Executed", "config_version": version}

    from coloco_cli.code.ops import HINTS as CODE_HINTS

    send_and_report(
        opts,
        send,
        lambda o: (
            f"executed {o['proposal_id']}; TrainingConfig version is now {o['config_version']}"
        ),
        hints={"CodePoolExceeded": CODE_HINTS["CodePoolExceeded"]},  # `code propose`'s vote
    )


@app.command()
@reads
def status(proposal: ProposalArg, *, opts: TxOptions) -> None:
    """Show a proposal's state, votes and deadlines.

    Example: coloco gov status 1234...
    """
    chain = opts.chain(signed=False)
    start = int(chain.deployment.deployment_block)
    pid = resolve_proposal_id(chain, proposal)
    p = find_proposal(chain, pid, start)
    v = chain.model_governor.proposal_votes(pid)
    against, for_, abstain = v.against_votes, v.for_votes, v.abstain_votes
    now = chain_now(chain)  # the governor's clock: the latest block's timestamp, in seconds
    actions = describe_actions(chain, p.targets, p.calldatas, p.values)
    if opts.json_out:
        emit_json({"proposal_id": str(pid), "description": p.description,
                   "state": proposal_state(chain, pid), "for": for_, "against": against,
                   "abstain": abstain, "vote_start": p.vote_start, "vote_end": p.vote_end,
                   "block": chain.block_number(), "now": now, "actions": actions})  # fmt: skip
        return
    console.print(f"proposal {pid}", soft_wrap=True)
    table = Table(show_header=False)
    table.add_row("description", p.description)
    table.add_row("actions", "\n".join(actions))
    table.add_row("state", proposal_state(chain, pid))
    table.add_row(
        "votes",
        f"for {fmt_units(for_)} / against {fmt_units(against)} / abstain {fmt_units(abstain)}",
    )
    table.add_row("voting opens", when(p.vote_start, now, future="opens", past="opened"))
    table.add_row("voting ends", when(p.vote_end, now, future="ends", past="ended"))
    table.add_row("chain time", f"{utc(now)} (the latest block)")
    table.add_row(
        "quorum",
        fmt_units(chain.model_governor.quorum(p.vote_start)) + " CMS"
        if now > p.vote_start
        else "set at vote start",
    )
    console.print(table)


@app.command("list")
@reads
def list_(*, opts: TxOptions) -> None:
    """List every proposal with its state.

    Example: coloco gov list
    """
    chain = opts.chain(signed=False)
    rows: list[dict[str, Any]] = []
    props = list_proposals(chain, int(chain.deployment.deployment_block))
    for p in props:
        actions = describe_actions(chain, p.targets, p.calldatas, p.values)
        v = chain.model_governor.proposal_votes(p.proposal_id)
        against, for_, abstain = v.against_votes, v.for_votes, v.abstain_votes
        rows.append({"proposal_id": str(p.proposal_id), "description": p.description,
                     "state": proposal_state(chain, p.proposal_id), "for": for_,
                     "against": against, "abstain": abstain,
                     "actions": actions})  # fmt: skip
    if opts.json_out:
        emit_json({"proposals": rows})
        return
    # one block per proposal: its full id on a line of its own (77 digits are never cut; any
    # unique prefix of them is accepted where an id is taken)
    now = chain_now(chain)
    console.print(f"{len(rows)} proposal(s); chain time {utc(now)}")
    for r, p in zip(rows, props, strict=True):
        if r["state"] == "Pending":
            voting = "voting " + when(p.vote_start, now, future="opens", past="opened")
        else:
            voting = "voting " + when(p.vote_end, now, future="ends", past="ended")
        console.print(r["proposal_id"], soft_wrap=True, highlight=False, markup=False)
        console.print(
            f"  {r['state']}; for {fmt_units(r['for'])} / against {fmt_units(r['against'])}; "
            f"{voting}\n  {r['description']}\n"
            + "".join(f"  does: {a}\n" for a in r["actions"]).rstrip("\n"),
            highlight=False,
            markup=False,
        )
