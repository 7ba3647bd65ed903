"""`coloco`: the single console script. Each command group lives in its own module."""

from __future__ import annotations

import importlib
import logging
import sys

import typer
from rich.console import Console

from protocol.errors import ColocoError

# (group name, module, help). A module defines `app = typer.Typer(...)`.
_GROUPS: tuple[tuple[str, str, str], ...] = (
    ("keys", "coloco_cli.keys", "Create and inspect node keys (encrypted keystores)."),
    ("node", "coloco_cli.node", "Operate a trainer node: register, stake, run, status."),
    ("rewards", "coloco_cli.rewards", "Show and claim ownership-token rewards."),
    ("gov", "coloco_cli.gov", "Delegate, propose, vote, queue and execute governance."),
    ("devnet", "coloco_cli.devnet", "Local anvil devnet: up, down, deploy."),
    ("ledger", "coloco_cli.ledger", "Run the ledger service."),
)

app = typer.Typer(
    name="coloco",
    help="coloco: train together, own together. Decentralized DiLoCo training, on-chain rewards.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


for _name, _module, _help in _GROUPS:
    try:
        _mod = importlib.import_module(_module)
    except ModuleNotFoundError as exc:  # group not built yet in this checkout
        if exc.name != _module:
            raise
        continue
    app.add_typer(_mod.app, name=_name, help=_help)

try:
    _demo = importlib.import_module("coloco_cli.demo")
    app.command("demo", help="Run the whole network on this machine, end to end.")(_demo.demo)
except ModuleNotFoundError as exc:
    if exc.name != "coloco_cli.demo":
        raise


def main() -> None:
    """Console entry point: coloco errors become a message and an exit code, not a traceback."""
    try:
        app(standalone_mode=False)
    except ColocoError as exc:
        Console(stderr=True).print(f"[bold red]error[/] ({exc.code}): {exc.message}")
        sys.exit(2)
    except typer.Abort:
        Console(stderr=True).print("aborted")
        sys.exit(130)
    except (typer.Exit, SystemExit) as exc:
        code = getattr(exc, "exit_code", None)
        if code is None:
            code = getattr(exc, "code", 0)
        sys.exit(code or 0)
    except Exception as exc:  # click usage errors carry their own exit code
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
