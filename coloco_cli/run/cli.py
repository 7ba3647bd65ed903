"""`coloco run open | status | list | close`: what a run's organiser does.

The work is in `coloco_cli.run.ops`; the demo runs these very commands.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from coloco_cli.common import console, emit_json
from coloco_cli.run.ops import (
    close_run,
    genesis,
    list_runs,
    open_run,
    parse_run_id,
    run_status,
)
from coloco_cli.tx import TxOptions, open_chain, reads
from protocol.runs import NAME_MAX, is_name

app = typer.Typer(no_args_is_help=True)

RunIdArg = Annotated[
    str, typer.Argument(help="Run id: a name (its sha256 is the id) or 0x + 64 hex digits.")
]
AdminTokenOpt = Annotated[
    str,
    typer.Option(
        "--admin-token",
        envvar="COLOCO_LEDGER_ADMIN_TOKEN",
        help="The ledger's admin token (the same COLOCO_LEDGER_ADMIN_TOKEN the ledger runs with).",
        show_default=False,
    ),
]


@app.command("open")
@reads
def open_(
    run_id: RunIdArg,
    *,
    admin_token: AdminTokenOpt = "development-admin-token",
    model: Annotated[str, typer.Option(help="Model preset: tiny, small, medium, large.")] = "tiny",
    seed: Annotated[int, typer.Option(help="Genesis seed (nodes pass the same --seed).")] = 0,
    opts: TxOptions,
) -> None:
    """Open a run: the ledger commits the genesis weights' hash as round 0 on chain.

    Example: coloco run open demo --admin-token "$COLOCO_LEDGER_ADMIN_TOKEN"
    """
    ep = opts.endpoints()
    rid = parse_run_id(run_id)
    chain = open_chain(ep)
    weights_hash, blob = genesis(model, seed)
    name = run_id if is_name(run_id) and len(run_id) <= NAME_MAX else None  # the ledger keeps it
    opened = open_run(
        chain, ep.ledger_url, admin_token, rid, genesis_hash=weights_hash, blob=blob, name=name
    )
    if opts.json_out:
        emit_json(opened.__dict__)
        return
    console.print(f"run {opened.run_id} open: round 0 = genesis {opened.genesis_checkpoint}")
    if opened.tx_hash:
        console.print(f"tx {opened.tx_hash}")
    console.print(f"next: nodes run `coloco node run --run-id {run_id} --model {model} ...`")


@app.command()
@reads
def status(
    run_id: RunIdArg,
    *,
    limit: Annotated[int, typer.Option(help="Latest rounds to show.", min=1, max=500)] = 10,
    opts: TxOptions,
) -> None:
    """Show a run: open on chain? its last committed round and checkpoint, the ledger's rounds.

    Example: coloco run status demo
    """
    ep = opts.endpoints()
    st = run_status(open_chain(ep), ep.ledger_url, parse_run_id(run_id), limit)
    if opts.json_out:
        emit_json(st)
        return
    if not st["open"]:
        console.print(f"run {st['run_id']} is not open: `coloco run open {run_id}`")
        return
    console.print(
        f"run {st['run_id']}: last committed round {st['last_round']}, checkpoint "
        f"{st['checkpoint']}"
    )
    if st["closed_after_round"] is not None:
        console.print(f"closed by its organiser after round {st['closed_after_round']}")
    rounds = st["ledger_rounds"]
    if rounds is None:
        console.print(f"(ledger at {ep.ledger_url} not reachable: on-chain state only)")
        return
    table = Table(title="rounds at the ledger (newest first)")
    cols = ("round", "state", "members", "tx_hash", "note")
    for col in cols:
        table.add_column(col)
    for r in rounds:
        table.add_row(*("-" if r[c] is None else str(r[c]) for c in cols))
    console.print(table)


@app.command("list")
@reads
def list_(
    *,
    opts: TxOptions,
) -> None:
    """List the runs opened on this deployment (from the chain's logs, in block chunks).

    Example: coloco run list --json
    """
    ep = opts.endpoints()
    runs = list_runs(open_chain(ep), int(ep.deployment().deployment_block))
    if opts.json_out:
        emit_json({"runs": runs})
        return
    table = Table(title="runs")
    for col in ("run_id", "last_round", "opened_block"):
        table.add_column(col)
    for r in runs:
        table.add_row(r["run_id"], str(r["last_round"]), str(r["opened_block"]))
    console.print(table)


@app.command()
@reads
def close(
    run_id: RunIdArg,
    *,
    admin_token: AdminTokenOpt = "development-admin-token",
    final_round: Annotated[
        int | None,
        typer.Option(
            min=0, help="Last round to train (default: the highest round the ledger has seen)."
        ),
    ] = None,
    opts: TxOptions,
) -> None:
    """Close a run: the ledger finishes the rounds in flight and refuses any later round
    (`run_closed`); nodes then stop. The chain keeps every committed round; release the final
    checkpoint with `gov propose --set released-checkpoint=...`.

    Example: coloco run close demo --admin-token "$COLOCO_LEDGER_ADMIN_TOKEN"
    """
    ep = opts.endpoints()
    rid = parse_run_id(run_id)
    closed = close_run(ep.ledger_url, admin_token, rid, final_round)
    st = run_status(open_chain(ep), ep.ledger_url, rid, 1)
    final = {
        "run_id": closed["run_id"],
        "final_round": closed["final_round"],
        "last_committed": st["last_round"],
        "checkpoint": st["checkpoint"],
    }
    if opts.json_out:
        emit_json(final)
        return
    console.print(
        f"run {final['run_id']} closed after round {final['final_round']} (last committed on "
        f"chain: {final['last_committed']}, checkpoint {final['checkpoint']})"
    )
    console.print(
        "once the final round is committed, release it: coloco gov propose --set "
        "released-checkpoint=<its checkpoint> --set released-checkpoint-uri=<where to get it> "
        "--description 'release run ...' "
        f"(`coloco run status {run_id}` shows it)"
    )
