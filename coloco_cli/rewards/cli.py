"""`coloco rewards show | claim`: what a contributor (a payout address) is owed and claiming it.

The ledger serves the cumulative amount owed to a payout address with its Merkle proof against its
latest committed root; `claim` checks that root on chain (claimable only after its dispute
window), then sends `RewardDistributor.claim(account, cumulativeAmount, proof)`
(`coloco_cli.rewards.ops`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from coloco_cli.common import console, emit_json, fmt_units
from coloco_cli.node.ops import utc
from coloco_cli.rewards.ops import Owed, claim_rewards, fetch_owed
from coloco_cli.tx import TxOptions, reads, send_and_report, sends
from protocol.types import Address

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

app = typer.Typer(no_args_is_help=True)

# a receipt's figures, one column each under a short header; its reason (free text, often
# longer than a terminal line) is listed after the table, not squeezed into a column beside them
RECEIPT_COLUMNS = {
    "run_id": "run", "round": "round", "node": "node", "claimed_tokens": "claimed",
    "verified_tokens": "verified", "quality": "quality", "reward": "reward",
}  # fmt: skip


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key == "reward":
        return f"{fmt_units(int(value))} CMS"
    if key in ("node", "run_id"):
        return f"{str(value)[:8]}…"
    if key == "quality":  # 4 significant digits: the exact figure is in --json
        return f"{float(value):.4g}"
    return str(value)


def _claimable_now(owed: Owed, claimed: int) -> int:
    """What `coloco rewards claim` can take now: nothing while the ledger's latest root is in its
    dispute window or revoked (its proof does not pay yet, or never)."""
    if owed.root_state in ("pending", "revoked"):
        return 0
    return max(owed.cumulative_amount - claimed, 0)


@app.command()
@reads
def show(
    address: Annotated[str, typer.Argument(help="Payout address to look up.")],
    *,
    opts: TxOptions,
) -> None:
    """Show what a payout address is owed, what it claimed, and its per-round receipts.

    A committed reward becomes claimable when its root's dispute window ends (the guardian or
    governance may revoke a bad root until then): `pending` rows say from when.

    Example: coloco rewards show 0xCOLD...
    """
    owed = fetch_owed(opts.endpoints().ledger_url, address)
    chain = opts.reader()  # views only: no web3 import (a quick start-up, bench.cli)
    claimed = int(chain.claimed(Address(owed.account)))
    balance = int(chain.token_balance(Address(owed.account)))
    now = _claimable_now(owed, claimed)
    if opts.json_out:
        emit_json({"account": owed.account, "owed": owed.cumulative_amount, "claimed": claimed,
                   "claimable": now, "root_state": owed.root_state,
                   "claimable_at": owed.claimable_at, "balance": balance,
                   "receipts": owed.receipts})  # fmt: skip
        return
    table = Table(title=f"rewards of {owed.account}", show_header=False)
    table.add_row("owed (cumulative)", f"{fmt_units(owed.cumulative_amount)} CMS")
    table.add_row("claimed", f"{fmt_units(claimed)} CMS")
    table.add_row("claimable now", f"{fmt_units(now)} CMS")
    unclaimed = max(owed.cumulative_amount - claimed, 0)
    if owed.root_state == "pending" and unclaimed:
        when = utc(owed.claimable_at) if owed.claimable_at is not None else "its window's end"
        table.add_row("in dispute window", f"{fmt_units(unclaimed)} CMS, claimable from {when}")
    elif owed.root_state == "revoked" and unclaimed:
        table.add_row(
            "revoked", f"{fmt_units(unclaimed)} CMS under a revoked root: wait for its correction"
        )
    table.add_row("token balance", f"{fmt_units(balance)} CMS")
    console.print(table)
    if owed.receipts:
        receipts = Table(title="receipts (one per round)")
        keys = [k for k in RECEIPT_COLUMNS if k in owed.receipts[0]]
        for key in keys:  # an amount is never cut short: the other columns give way
            receipts.add_column(RECEIPT_COLUMNS[key], no_wrap=key in ("round", "quality", "reward"))
        for rec in owed.receipts:
            receipts.add_row(*(_cell(k, rec.get(k)) for k in keys))
        console.print(receipts)
        for rec in owed.receipts:
            if rec.get("reason"):
                console.print(f"{_where(rec)}, {_cell('node', rec.get('node'))}: "
                              f"{rec['reason']}", markup=False, highlight=False)  # fmt: skip
        for rec in owed.receipts:  # each round's root, while it is not final
            if rec.get("root_state") in ("pending", "revoked"):
                at = rec.get("claimable_at")
                when = f", claimable from {utc(int(at))}" if at is not None else ""
                console.print(f"{_where(rec)}: root {rec['root_state']}{when}")


def _where(receipt: dict[str, Any]) -> str:
    """`run 0x0101…, round 4`: receipts of every run are listed together."""
    run = f"run {_cell('run_id', receipt['run_id'])}, " if receipt.get("run_id") else ""
    return f"{run}round {receipt.get('round')}"


@app.command()
@sends
def claim(
    address: Annotated[
        str | None, typer.Argument(help="Payout address to claim for (default: the sender).")
    ] = None,
    *,
    wait_final: Annotated[
        bool,
        typer.Option(
            "--wait-final", help="Wait (up to 2 min) for a pending root's dispute window to end."
        ),
    ] = False,
    opts: TxOptions,
) -> None:
    """Claim every ownership token owed to a payout address, with the ledger's Merkle proof.

    A committed reward becomes claimable once its root's dispute window has passed (the
    guardian may revoke a bad root until then); the command says when, or waits with
    --wait-final.

    Example: coloco rewards claim 0xCOLD... --account operator
    """
    ledger_url = opts.endpoints().ledger_url

    def send(chain: ChainClient) -> dict[str, Any]:
        who = address or str(chain.account_address)
        return claim_rewards(chain, ledger_url, who, wait_pending=wait_final).__dict__

    send_and_report(
        opts,
        send,
        lambda o: (
            f"claimed {fmt_units(o['paid'])} CMS for {o['account']}; "
            f"balance now {fmt_units(o['balance'])} CMS"
        ),
    )
