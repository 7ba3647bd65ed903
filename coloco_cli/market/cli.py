"""`coloco market`: the compute market's command group.

Each part registers its own sub-group: `lease` (coloco_cli.market.lease). Offers, requests and
challenges are added beside it.
"""

from __future__ import annotations

import typer

from coloco_cli.market import lease

app = typer.Typer(no_args_is_help=True)
app.add_typer(
    lease.app,
    name="lease",
    help="Lease a node for a run's rounds: open, status, claim, refund (paid in the round's root).",
)
