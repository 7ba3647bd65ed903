"""`coloco code submit | list | show | approve | propose | reject | claim`: paid code contributions.

Anyone submits; the review committee (appointed by governance) approves an amount from the run's
code pool or rejects with a reason; large amounts go to a governance vote (`approveByVote`).
Every command takes `--json` (`coloco_cli.code.ops` does the work).
"""

from __future__ import annotations

from typing import Annotated

import typer

from coloco_cli.code import ops
from coloco_cli.common import console, emit_json, fmt_units, parse_amount
from coloco_cli.tx import TxOptions, reads, report, send_and_report, sends

app = typer.Typer(no_args_is_help=True)
IdArg = Annotated[int, typer.Argument(help="The contribution id.")]


@app.command()
@sends
def submit(
    run_id: Annotated[
        str, typer.Argument(help="The run: its name (e.g. demo) or 0x + 64 hex digits.")
    ],
    *,
    repo: Annotated[str, typer.Option(help="Repository URI.")],
    commit: Annotated[str, typer.Option(help="Commit hash (git SHA-1 or SHA-256, hex).")],
    description: Annotated[str, typer.Option(help="URI of a description (PR, issue, doc).")],
    opts: TxOptions,
) -> None:
    """Submit a code contribution to a run for review.

    Example: coloco code submit demo --repo https://github.com/o/r.git --commit 9fceb02d...
    --description https://github.com/o/r/pull/7
    """
    send_and_report(
        opts,
        lambda chain: ops.submit(chain, run_id, repo, commit, description),
        lambda o: f"contribution #{o['id']} submitted (tx {o['tx']})",
        hints=ops.HINTS,
    )


@app.command("list")
@reads
def list_(
    run_id: Annotated[
        str | None, typer.Option("--run", help="Only this run (its name or 0x id).")
    ] = None,
    *,
    opts: TxOptions,
) -> None:
    """List submitted contributions with their status (and reasons of rejections)."""
    items = ops.list_all(opts.chain(signed=False), run_id)
    if opts.json_out:
        emit_json(items)
        return
    for item in items:
        console.print(
            f"#{item['id']} {item['status']} {fmt_units(int(item['amount']))} CMS "
            f"{item['repository_uri']} {item['commit']}",
            markup=False,
            highlight=False,
            soft_wrap=True,  # one contribution a line, for grep, whatever the terminal's width
        )


@app.command()
@reads
def show(cid: IdArg, *, opts: TxOptions) -> None:
    """Show one contribution: run, contributor, status, amount, repository, commit, description."""
    out = ops.show(opts.chain(signed=False), cid)
    rows = [
        ("run", out["run_id"]), ("contributor", out["contributor"]), ("status", out["status"]),
        ("amount", f"{fmt_units(int(out['amount']))} CMS"), ("repository", out["repository_uri"]),
        ("commit", out["commit"]), ("description", out["description_uri"]),
    ]  # fmt: skip
    if "reason" in out:
        rows.append(("rejected because", out["reason"]))
    report(opts, out, f"contribution #{cid}\n" + "\n".join(f"  {k:<17} {v}" for k, v in rows))


@app.command()
@sends
def approve(
    cid: IdArg,
    amount: Annotated[str, typer.Argument(help="Tokens to approve, e.g. 5 (CMS).")],
    *,
    opts: TxOptions,
) -> None:
    """Approve a contribution for an amount of the code pool (a committee member).

    Example: coloco code approve 1 5
    """
    units = parse_amount(amount, what="amount")
    send_and_report(
        opts,
        lambda chain: ops.approve(chain, cid, units),
        lambda o: (
            f"contribution #{cid} approved for {fmt_units(int(o['amount']))} CMS of the "
            f"run's code pool (tx {o['tx']}); next: coloco code claim {cid}"
        ),
        hints=ops.HINTS,
    )


@app.command()
@sends
def propose(
    cid: IdArg,
    amount: Annotated[str, typer.Argument(help="Tokens to pay, e.g. 8 (CMS).")],
    *,
    description: Annotated[str | None, typer.Option(help="Proposal text.")] = None,
    opts: TxOptions,
) -> None:
    """Propose to governance paying a contribution above the committee's threshold
    (CodeRegistry.approveByVote); then `coloco gov vote | queue | execute` and `code claim`.

    Example: coloco code propose 2 8 --account holder
    """
    units = parse_amount(amount, what="amount")
    send_and_report(
        opts,
        lambda chain: ops.propose_approval(chain, cid, units, description),
        lambda o: (
            f"proposal {o['proposal_id']} created: {o['description']}\n"
            f"next: coloco gov vote {o['proposal_id']} --support for|against|abstain"
        ),
        hints=ops.HINTS,
    )


@app.command()
@sends
def reject(
    cid: IdArg,
    *,
    reason: Annotated[str, typer.Option(help="Why (recorded in the event).")],
    opts: TxOptions,
) -> None:
    """Reject a contribution with a reason (a committee member)."""
    send_and_report(
        opts,
        lambda chain: ops.reject(chain, cid, reason),
        lambda o: f"contribution #{cid} rejected: {o['reason']} (tx {o['tx']})",
        hints=ops.HINTS,
    )


@app.command()
@sends
def claim(cid: IdArg, *, opts: TxOptions) -> None:
    """Pay an approved contribution's tokens to its contributor (anyone may send it)."""
    send_and_report(
        opts,
        lambda chain: ops.claim(chain, cid),
        lambda o: (
            f"contribution #{cid}: {fmt_units(int(o['amount']))} CMS paid to "
            f"{o['contributor']} (tx {o['tx']})"
        ),
        hints=ops.HINTS,
    )
