"""`coloco`: the single console script: the command tree of `coloco_cli.app`, `coloco demo`
(a client of that tree, so added here rather than there) and the exit codes.

Exit codes, for scripts: 0 success, 1 an error (a message `error (<code>): ...` on stderr, never a
traceback), 2 a usage error (unknown option, bad value), 130 interrupted. `node run` documents
more codes of its own (docs/trainer.md).
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

import typer

from coloco_cli.app import COMMANDS, app
from coloco_cli.lazy import Lazy
from protocol.errors import ColocoError

if TYPE_CHECKING:
    from rich.console import Console

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

log = logging.getLogger("coloco")

# on top of the public tree, whose commands are all the demo runs (imported when named)
COMMANDS.append(Lazy("demo", "coloco_cli.demo.cli", "demo"))


def _stderr() -> Console:
    from rich.console import Console  # only when there is something to say: rich costs start-up

    return Console(stderr=True)


def main() -> None:
    """Console entry point: every error becomes a message and an exit code, never a traceback."""
    try:
        code = app(standalone_mode=False)
    except ColocoError as exc:
        _stderr().print(f"[bold red]error[/] ({exc.code}): {exc.message}", highlight=False)
        sys.exit(EXIT_ERROR)
    except (typer.Abort, KeyboardInterrupt):
        _stderr().print("aborted")
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
        _stderr().print(
            f"[bold red]error[/] (internal): {exc.__class__.__name__}: {exc}. This is a bug in "
            "coloco: rerun with -v for the traceback and report it",
            highlight=False,
        )
        sys.exit(EXIT_ERROR)
    sys.exit(code if isinstance(code, int) else 0)
