"""The demo's hands: every action is a public `coloco ...` command, printed as `$ coloco ...`.

Short commands (register, stake, open a run, claim, vote) run in this process through the same
Typer app the console script runs (a new process per command would cost a second of imports
each); long-running ones (the ledger, the rendezvous, the nodes) are child processes started
with the same argv. What a command prints goes to `logs/commands.log`; its `--json` object is
returned. Secrets on a command line are shown as `$NAME`, as a person would keep them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.errors import ColocoError


@dataclass(frozen=True)
class Secret:
    """A command-line value printed as `$name` (a private key, a token)."""

    value: str
    name: str


Arg = str | int | Path | Secret


def show(args: tuple[Arg, ...] | list[Arg]) -> str:
    """The command line as a person would type it (secrets as `$NAME`)."""
    words = [f"${a.name}" if isinstance(a, Secret) else shlex.quote(str(a)) for a in args]
    return "$ coloco " + " ".join(words)


def plain(args: tuple[Arg, ...] | list[Arg]) -> list[str]:
    return [a.value if isinstance(a, Secret) else str(a) for a in args]


@contextlib.contextmanager
def scoped_environ(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


class Shell:
    """Runs `coloco` commands for the demo and prints each line through `say`."""

    def __init__(self, say: Callable[[str], None], log_path: Path) -> None:
        self.say = say
        self.log_path = log_path
        self.env: dict[str, str] = {}
        log_path.parent.mkdir(parents=True, exist_ok=True)

    def export(self, **values: str) -> None:
        """Settings every later command reads from the environment (printed once, as export)."""
        self.env.update(values)
        self.say("$ export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in values.items()))

    def run(self, *args: Arg) -> str:
        """Run `coloco ARGS` in this process; returns what it printed on stdout."""
        from typer.main import get_command

        from coloco_cli.app import app

        self.say(show(args))
        out, err = io.StringIO(), io.StringIO()
        try:
            with (
                scoped_environ(self.env),
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(err),
            ):
                code = get_command(app).main(
                    args=plain(args), prog_name="coloco", standalone_mode=False
                )
            if isinstance(code, int) and code != 0:  # a typer.Exit(code)
                raise ColocoError(f"{show(args)} exited {code}: {err.getvalue()[-500:]}")
        finally:
            with self.log_path.open("a") as log:
                log.write(f"{show(args)}\n{out.getvalue()}{err.getvalue()}\n")
        return out.getvalue()

    def json(self, *args: Arg) -> Any:
        """Run `coloco ARGS --json`; returns its JSON object."""
        text = self.run(*args, "--json").strip()
        try:
            return json.loads(text.splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise ColocoError(
                f"{show(args)} --json printed no JSON object: {text[-300:]!r}"
            ) from exc

    def argv(self, *args: Arg) -> list[str]:
        """The argv of a long-running `coloco ARGS` child process (the line is printed)."""
        self.say(show(args))
        return [sys.executable, "-m", "coloco_cli", *plain(args)]
