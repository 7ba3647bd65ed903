"""The `coloco` command tree: every public command group (each a package with its `cli.py`),
`coloco audit`, and the options of the root (`--verbose`, `--version`).

`coloco demo` is not registered here: the demo is a client of these commands (its shell runs
them in-process through this app), so `coloco_cli.main` adds it on top, beside the exit codes.
"""

from __future__ import annotations

import logging

import typer

from coloco_cli import __version__
from coloco_cli.lazy import Lazy, lazy_group

# Each group is imported when the command line names it (coloco_cli.lazy): `coloco --version`
# imports none, `coloco rewards show` only coloco_cli.rewards.
COMMANDS: list[Lazy] = [
    Lazy("keys", "coloco_cli.keys.cli", "app",
         "Named accounts and node keys (encrypted keystores)."),
    Lazy("node", "coloco_cli.node.cli", "app",
         "Operate a trainer node: register, stake, run, status."),
    Lazy("rewards", "coloco_cli.rewards.cli", "app", "Show and claim ownership-token rewards."),
    Lazy("fund", "coloco_cli.fund.cli", "app",
         "Fund a run with ETH: deposit, status, claim, refund."),
    Lazy("code", "coloco_cli.code.cli", "app",
         "Code contributions: submit, list, show, approve, reject."),
    Lazy("gov", "coloco_cli.gov.cli", "app",
         "Delegate, propose, vote, queue and execute governance."),
    Lazy("slash", "coloco_cli.slash.cli", "app",
         "Report equivocation; propose, veto, execute slashes."),
    Lazy("market", "coloco_cli.market.cli", "app",
         "The compute market: prove hardware, offer it, rank offers, lease nodes."),
    Lazy("watch", "coloco_cli.watch.cli", "app",
         "Recompute committed roots from public data (anyone)."),
    Lazy("devnet", "coloco_cli.devnet.cli", "app", "Local anvil devnet: up, down, deploy, status."),
    Lazy("ledger", "coloco_cli.ledger.cli", "app", "Run the ledger service."),
    Lazy("rendezvous", "coloco_cli.rendezvous.cli", "app",
         "Host a run's rendezvous store (organisers)."),
    Lazy("run", "coloco_cli.run.cli", "app",
         "Open, inspect, list and close training runs (organisers)."),
    Lazy("model", "coloco_cli.model.cli", "app",
         "Pull a checkpoint (hash-checked on chain), eval, sample."),
    Lazy("audit", "coloco_cli.audit", "audit_command"),
]  # fmt: skip

app = typer.Typer(
    name="coloco",
    help="coloco: train together, own together. Decentralized DiLoCo training, on-chain rewards.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=lazy_group(COMMANDS),
)

_QUIET_LOGGERS = ("httpx", "httpcore", "web3", "urllib3")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"coloco {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
    version: bool = typer.Option(
        False,
        "--version",
        help="Print the version and exit.",
        callback=_print_version,
        is_eager=True,
    ),
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not verbose:  # one INFO line per HTTP request drowns what the user needs to read
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
