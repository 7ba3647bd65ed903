"""`coloco market`: the compute market. This file only registers the commands; each lives in
its own module (``challenge``: the timed hardware challenge)."""

from __future__ import annotations

import typer

from coloco_cli.market.challenge import challenge

app = typer.Typer(
    help="The compute market: prove hardware with the timed challenge.", no_args_is_help=True
)
app.command("challenge")(challenge)
