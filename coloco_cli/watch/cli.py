"""`coloco watch roots`: recompute every committed root from public data (issue 25, F3).

Exit code 1 when a committed rewards root, reward total or ETH root differs from what the
ledger's public scores give, or when a commit names a run or round the ledger does not know:
the guardian can revoke a root while it is pending (`docs/contracts.md`).
"""

from __future__ import annotations

import httpx
import typer
from rich.table import Table

from coloco_cli.common import console, emit_json
from coloco_cli.tx import TxOptions, reads
from coloco_cli.watch.ops import Scores, check_eth_roots, check_rewards_roots

app = typer.Typer(no_args_is_help=True)


@app.command()
@reads
def roots(*, opts: TxOptions) -> None:
    """Rebuild every committed rewards root and ETH root from the ledger's public scores and
    chain events; list each one that differs (exit code 1 if any).

    Example: coloco watch roots --ledger-url http://127.0.0.1:8000 --json
    """
    chain = opts.chain(signed=False)
    with httpx.Client(base_url=opts.endpoints().ledger_url, timeout=10.0) as http:
        scores = Scores(http)
        found = check_rewards_roots(chain, scores)
        if "RunFunding" in chain.deployment.contracts:
            found += check_eth_roots(chain, scores)
    if opts.json_out:
        emit_json({"mismatches": [f.as_json() for f in found], "ok": not found})
    elif not found:
        console.print("every committed root matches the ledger's public scores")
    else:
        table = Table(title="committed roots that public data does not reproduce")
        for column in ("kind", "run", "round", "committed", "expected", "block"):
            table.add_column(column)
        for f in found:
            table.add_row(f.kind, f.run_id[:10] + "…", str(f.round), f.committed[:18],
                          f.expected[:18], str(f.block))  # fmt: skip
        console.print(table)
    if found:
        raise typer.Exit(1)
