"""`coloco`: the single console script. Each command group lives in its own module."""

from __future__ import annotations

import logging
import sys

import typer
from rich.console import Console

from coloco_cli import devnet, gov, keys, ledger, node, rewards
from coloco_cli.demo import demo
from protocol.errors import ColocoError

app = typer.Typer(
    name="coloco",
    help="coloco: train together, own together. Decentralized DiLoCo training, on-chain rewards.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

app.add_typer(keys.app, name="keys", help="Create and inspect node keys (encrypted keystores).")
app.add_typer(node.app, name="node", help="Operate a trainer node: register, stake, run, status.")
app.add_typer(rewards.app, name="rewards", help="Show and claim ownership-token rewards.")
app.add_typer(gov.app, name="gov", help="Delegate, propose, vote, queue and execute governance.")
app.add_typer(devnet.app, name="devnet", help="Local anvil devnet: up, down, deploy, status.")
app.add_typer(ledger.app, name="ledger", help="Run the ledger service.")
app.command("demo")(demo)

_QUIET_LOGGERS = ("httpx", "httpcore", "web3", "urllib3")


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not verbose:  # one INFO line per HTTP request drowns what the user needs to read
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


def main() -> None:
    """Console entry point: coloco errors become a message and an exit code, not a traceback."""
    try:
        code = app(standalone_mode=False)
    except ColocoError as exc:
        Console(stderr=True).print(f"[bold red]error[/] ({exc.code}): {exc.message}")
        sys.exit(2)
    except typer.Abort:
        Console(stderr=True).print("aborted")
        sys.exit(130)
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
        raise
    sys.exit(code if isinstance(code, int) else 0)
