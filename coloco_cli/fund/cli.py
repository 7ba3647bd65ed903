"""`coloco fund open | deposit | status | claim | refund`: fund a run's compute with ETH.

Deposits pay compute contributors in ETH per verified work; backers earn the capital pool's
ownership in proportion to deposit x time funded, vesting linearly after the funding ends.
Every command takes `--json` (`coloco_cli.fund.ops` does the work).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from coloco_cli.common import fmt_units, parse_amount
from coloco_cli.fund import ops
from coloco_cli.tx import TxOptions, reads, report, send_and_report, sends

if TYPE_CHECKING:
    from protocol.chain import ChainClient

app = typer.Typer(no_args_is_help=True)
RunArg = Annotated[str, typer.Argument(help="The run id (0x + 64 hex digits).")]


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

    Example: coloco fund open 0xRUN --end-in 3600 --eth-per-round 0.1
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
        lambda o: f"run open for deposits until {time.ctime(o['funding_end'])}",
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

    Example: coloco fund deposit 0xRUN 2.5
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

    Example: coloco fund status 0xRUN --backer 0xBACKER
    """
    st = ops.status(opts.chain(signed=False), run_id, backer)
    lines = [f"{k}: {v}" for k, v in st.items() if k != "backer"]
    lines += [f"backer.{k}: {v}" for k, v in (st.get("backer") or {}).items()]
    report(opts, st, "\n".join(lines))


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
    opts: TxOptions,
) -> None:
    """Claim ETH earned for compute (proof from the ledger) and/or vested capital ownership.

    Example: coloco fund claim 0xRUN 0xPAYOUT; coloco fund claim 0xRUN 0xBACKER --no-eth --vested
    """
    ledger_url = opts.endpoints().ledger_url

    def send(chain: ChainClient) -> dict[str, Any]:
        who = payee or str(chain.account_address)
        out: dict[str, Any] = {}
        if eth:
            out["eth"] = ops.claim_eth(chain, ledger_url, run_id, who)
        if vested:
            out["vested"] = ops.claim_vested(chain, run_id, who)
        return out

    send_and_report(opts, send, lambda o: json.dumps(o, indent=1), hints=ops.HINTS)


@app.command()
@sends
def refund(
    run_id: RunArg,
    *,
    backer: Annotated[str, typer.Option(help="The backer to refund.")],
    opts: TxOptions,
) -> None:
    """Take a backer's pro rata refund of a cancelled run's unspent ETH.

    Example: coloco fund refund 0xRUN --backer 0xBACKER
    """
    send_and_report(
        opts,
        lambda chain: ops.refund(chain, run_id, backer),
        lambda o: f"refunded {o['backer']} (tx {o['tx']})",
        hints=ops.HINTS,
    )
