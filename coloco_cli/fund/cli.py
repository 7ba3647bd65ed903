"""`coloco fund open | deposit | status | claim | refund`: fund a run's compute with ETH.

Deposits pay compute contributors in ETH per verified work; backers earn the capital pool's
ownership in proportion to deposit x time funded, vesting linearly after the funding ends.
Every command takes `--json` (`coloco_cli.fund.ops` does the work).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from coloco_cli.common import fmt_units, parse_amount
from coloco_cli.fund import ops
from coloco_cli.node.ops import utc
from coloco_cli.tx import TxOptions, reads, report, send_and_report, sends

if TYPE_CHECKING:
    from protocol.chain import ChainClient

app = typer.Typer(no_args_is_help=True)
RunArg = Annotated[str, typer.Argument(help="The run: its name (e.g. demo) or 0x + 64 hex digits.")]


@app.command("open")
@sends
def open_(
    run_id: RunArg,
    *,
    end_in: Annotated[int, typer.Option(help="Seconds from now until deposits close.")] = 3600,
    eth_per_round: Annotated[str, typer.Option(help="Most ETH one round pays compute.")] = "0.1",
    opts: TxOptions,
) -> None:
    """Open a run for deposits (the run organiser, COMMITTER_ROLE).

    Example: coloco fund open demo --end-in 3600 --eth-per-round 0.1
    """
    per_round = parse_amount(eth_per_round, what="--eth-per-round")
    ops.run_bytes(run_id)

    def send(chain: ChainClient) -> dict[str, Any]:
        end = int(chain.w3.eth.get_block("latest")["timestamp"]) + end_in
        tx = ops.open_run(chain, run_id, end, per_round)
        return {"tx": tx, "funding_end": end, "eth_per_round_wei": str(per_round)}

    send_and_report(
        opts,
        send,
        lambda o: f"run open for deposits until {utc(o['funding_end'])} (tx {o['tx']})",
        hints=ops.HINTS,
    )


@app.command()
@sends
def deposit(
    run_id: RunArg,
    amount: Annotated[str, typer.Argument(help="ETH to deposit, e.g. 1.5 or 100wei.")],
    *,
    opts: TxOptions,
) -> None:
    """Deposit ETH into a run: it pays verified compute; you earn capital-pool ownership.

    Example: coloco fund deposit demo 2.5
    """
    wei = parse_amount(amount)

    def send(chain: ChainClient) -> dict[str, Any]:
        tx = ops.deposit(chain, run_id, wei)
        return {"tx": tx, "backer": chain.account_address, "deposit_wei": str(wei)}

    send_and_report(
        opts,
        send,
        lambda o: f"deposited {fmt_units(wei)} ETH from {o['backer']}",
        hints=ops.HINTS,
    )


@app.command()
@reads
def status(
    run_id: RunArg,
    *,
    backer: Annotated[str | None, typer.Option(help="Also show this backer.")] = None,
    opts: TxOptions,
) -> None:
    """A run's funding: deposits, ETH paid to compute, capital pool; a backer's vesting.

    Example: coloco fund status demo --backer 0xBACKER
    """
    st = ops.status(opts.chain(signed=False), run_id, backer)
    report(opts, st, _status_text)


def _eth(wei: str | int) -> str:
    return f"{fmt_units(int(wei))} ETH"


def _cms(units: str | int) -> str:
    return f"{fmt_units(int(units))} CMS"


def _status_text(st: dict[str, Any]) -> str:
    """`fund status` for a person: ETH and CMS amounts, UTC times (--json has the raw figures)."""
    cancelled = f"cancelled {utc(st['cancelled_at'])}" if st["cancelled_at"] else "live"
    last = st["last_eth_round"]
    lines = [
        f"run {st['run_id']} ({cancelled})",
        f"  funding ends        {utc(st['funding_end'])}",
        f"  deposited           {_eth(st['total_deposited_wei'])}",
        f"  held                {_eth(st['held_wei'])}",
        f"  committed / paid    {_eth(st['eth_committed_wei'])} / "
        f"{_eth(st['eth_paid_to_compute_wei'])} to compute",
        f"  per round at most   {_eth(st['eth_per_round_wei'])}",
        f"  last ETH round      {'none yet' if last is None else last}",
        f"  capital pool        {_cms(st['capital_pool'])}",
        f"  refund pool         {_eth(st['refund_pool_wei'])} "
        f"({_eth(st['refunded_wei'])} refunded)",
    ]
    b = st.get("backer")
    if b:
        lines += [
            f"backer {b['address']}",
            f"  deposited           {_eth(b['deposited_wei'])}",
            f"  entitlement         {_cms(b['entitlement'])}",
            f"  vested / claimed    {_cms(b['vested'])} / {_cms(b['claimed'])}",
        ]
    return "\n".join(lines)


@app.command()
@sends
def claim(
    run_id: RunArg,
    payee: Annotated[
        str | None,
        typer.Argument(help="Compute payout address or backer to pay (default: the sender)."),
    ] = None,
    *,
    eth: Annotated[bool, typer.Option(help="Claim ETH earned for compute.")] = True,
    vested: Annotated[bool, typer.Option(help="Claim vested capital ownership.")] = False,
    wait_final: Annotated[
        bool,
        typer.Option(
            "--wait-final",
            help="Wait (up to 2 min) for a pending ETH root's dispute window to end.",
        ),
    ] = False,
    opts: TxOptions,
) -> None:
    """Claim ETH earned for compute (proof from the ledger) and/or vested capital ownership.

    ETH earned becomes claimable once its root's dispute window has passed (the guardian may
    revoke a bad root until then); the command says when, or waits with --wait-final.

    Example: coloco fund claim demo 0xPAYOUT; coloco fund claim demo 0xBACKER --no-eth --vested
    """
    ledger_url = opts.endpoints().ledger_url

    def send(chain: ChainClient) -> dict[str, Any]:
        who = payee or str(chain.account_address)
        out: dict[str, Any] = {}
        if eth:
            out["eth"] = ops.claim_eth(chain, ledger_url, run_id, who, wait_final=wait_final)
        if vested:
            out["vested"] = ops.claim_vested(chain, run_id, who)
        return out

    send_and_report(opts, send, _claim_text, hints=ops.HINTS)


def _claim_text(out: dict[str, Any]) -> str:
    lines = []
    if "eth" in out:
        e = out["eth"]
        tx = f" (tx {e['tx']})" if "tx" in e else ""
        lines.append(
            f"paid {_eth(e['eth_paid_wei'])} to {e['account']} for compute{tx}; "
            f"{_eth(e['cumulative_wei'])} earned in all"
        )
    if "vested" in out:
        v = out["vested"]
        lines.append(f"paid {_cms(v['capital_paid'])} of vested capital to {v['backer']} "
                     f"(tx {v['tx']})")  # fmt: skip
    return "\n".join(lines) or "nothing claimed: pass --eth and/or --vested"


@app.command()
@sends
def refund(
    run_id: RunArg,
    *,
    backer: Annotated[str, typer.Option(help="The backer to refund.")],
    opts: TxOptions,
) -> None:
    """Take a backer's pro rata refund of a cancelled run's unspent ETH.

    Example: coloco fund refund demo --backer 0xBACKER
    """
    send_and_report(
        opts,
        lambda chain: ops.refund(chain, run_id, backer),
        lambda o: f"refunded {o['backer']} (tx {o['tx']})",
        hints=ops.HINTS,
    )
