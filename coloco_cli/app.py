"""The `coloco` command tree: every public command group (each a package with its `cli.py`),
`coloco audit`, and the options of the root (`--verbose`, `--version`).

`coloco demo` is not registered here: the demo is a client of these commands (its shell runs
them in-process through this app), so `coloco_cli.main` adds it on top, beside the exit codes.
"""

from __future__ import annotations

import logging

import typer

from coloco_cli import __version__
from coloco_cli.audit import audit_command
from coloco_cli.code.cli import app as code_app
from coloco_cli.devnet.cli import app as devnet_app
from coloco_cli.fund.cli import app as fund_app
from coloco_cli.gov.cli import app as gov_app
from coloco_cli.keys.cli import app as keys_app
from coloco_cli.ledger.cli import app as ledger_app
from coloco_cli.model.cli import app as model_app
from coloco_cli.node.cli import app as node_app
from coloco_cli.rendezvous.cli import app as rendezvous_app
from coloco_cli.rewards.cli import app as rewards_app
from coloco_cli.run.cli import app as run_app
from coloco_cli.slash.cli import app as slash_app
from coloco_cli.watch.cli import app as watch_app

app = typer.Typer(
    name="coloco",
    help="coloco: train together, own together. Decentralized DiLoCo training, on-chain rewards.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

app.add_typer(keys_app, name="keys", help="Named accounts and node keys (encrypted keystores).")
app.add_typer(node_app, name="node", help="Operate a trainer node: register, stake, run, status.")
app.add_typer(rewards_app, name="rewards", help="Show and claim ownership-token rewards.")
app.add_typer(fund_app, name="fund", help="Fund a run with ETH: deposit, status, claim, refund.")
app.add_typer(
    code_app, name="code", help="Code contributions: submit, list, show, approve, reject."
)
app.add_typer(gov_app, name="gov", help="Delegate, propose, vote, queue and execute governance.")
app.add_typer(slash_app, name="slash", help="Report equivocation; propose, veto, execute slashes.")
app.add_typer(watch_app, name="watch", help="Recompute committed roots from public data (anyone).")
app.add_typer(devnet_app, name="devnet", help="Local anvil devnet: up, down, deploy, status.")
app.add_typer(ledger_app, name="ledger", help="Run the ledger service.")
app.add_typer(rendezvous_app, name="rendezvous", help="Host a run's rendezvous store (organisers).")
app.add_typer(run_app, name="run", help="Open, inspect, list and close training runs (organisers).")
app.add_typer(
    model_app, name="model", help="Pull a checkpoint (hash-checked on chain), eval, sample."
)
app.command("audit")(audit_command)

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
