"""`coloco`: the single console script. Each command group is a package with its `cli.py`.

Exit codes, for scripts: 0 success, 1 an error (a message `error (<code>): ...` on stderr, never a
traceback), 2 a usage error (unknown option, bad value), 130 interrupted. `node run` documents
more codes of its own (docs/trainer.md).
"""

from __future__ import annotations

import logging
import sys

import typer
from rich.console import Console

from coloco_cli import __version__
from coloco_cli.audit import audit_command
from coloco_cli.code.cli import app as code_app
from coloco_cli.demo.cli import demo
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
from protocol.errors import ColocoError

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

log = logging.getLogger("coloco")

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
app.add_typer(devnet_app, name="devnet", help="Local anvil devnet: up, down, deploy, status.")
app.add_typer(ledger_app, name="ledger", help="Run the ledger service.")
app.add_typer(rendezvous_app, name="rendezvous", help="Host a run's rendezvous store (organisers).")
app.add_typer(run_app, name="run", help="Open, inspect, list and close training runs (organisers).")
app.add_typer(
    model_app, name="model", help="Pull a checkpoint (hash-checked on chain), eval, sample."
)
app.command("demo")(demo)
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


def main() -> None:
    """Console entry point: every error becomes a message and an exit code, never a traceback."""
    err = Console(stderr=True)
    try:
        code = app(standalone_mode=False)
    except ColocoError as exc:
        err.print(f"[bold red]error[/] ({exc.code}): {exc.message}", highlight=False)
        sys.exit(EXIT_ERROR)
    except (typer.Abort, KeyboardInterrupt):
        err.print("aborted")
        sys.exit(EXIT_INTERRUPTED)
    except (typer.Exit, SystemExit) as exc:
        exit_code = getattr(exc, "exit_code", None)
        if exit_code is None:
            exit_code = getattr(exc, "code", 0)
        sys.exit(exit_code or 0)
    except Exception as exc:
        # Usage errors: typer vendors its own click, so match on the interface, not the class.
        show, exit_code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(exit_code, int):
            show()
            sys.exit(exit_code)
        log.debug("unexpected error", exc_info=True)
        err.print(
            f"[bold red]error[/] (internal): {exc.__class__.__name__}: {exc}. This is a bug in "
            "coloco: rerun with -v for the traceback and report it",
            highlight=False,
        )
        sys.exit(EXIT_ERROR)
    sys.exit(code if isinstance(code, int) else 0)
