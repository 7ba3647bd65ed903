"""Command groups imported when first used, so that a command loads only what it runs.

Each group's package imports what its commands need (web3, eth_account, torch, fastapi, ...):
importing every group to parse `coloco --version` took seconds. The root group of `coloco_cli.app`
is a :class:`LazyGroup`: its `commands` mapping lists every name at once (for help, completion
and the tests that walk the tree) and imports a group's package only when that group is looked up.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar

import typer
from typer.core import TyperGroup
from typer.main import get_group

Command = Any  # typer's vendored click.Command (typer._click is private)


@dataclass(frozen=True)
class Lazy:
    """`coloco NAME` is `module.attr`: a Typer sub-app (a group) or a command function."""

    name: str
    module: str
    attr: str
    help: str | None = None

    def load(self) -> Command:
        obj = getattr(importlib.import_module(self.module), self.attr)
        holder = typer.Typer()
        if isinstance(obj, typer.Typer):
            holder.add_typer(obj, name=self.name, help=self.help)
        else:
            holder.command(self.name, help=self.help)(obj)
        return get_group(holder).commands[self.name]


class LazyCommands(MutableMapping[str, Command]):
    """A group's commands by name: the loaded ones, then the lazy ones (loaded on first access)."""

    def __init__(self, loaded: MutableMapping[str, Command], lazy: list[Lazy]) -> None:
        self._loaded = dict(loaded)
        self._lazy = {entry.name: entry for entry in lazy if entry.name not in self._loaded}

    def __getitem__(self, name: str) -> Command:
        if name not in self._loaded:
            entry = self._lazy.pop(name, None)
            if entry is None:
                raise KeyError(name)
            self._loaded[name] = entry.load()
        return self._loaded[name]

    def __setitem__(self, name: str, cmd: Command) -> None:
        self._lazy.pop(name, None)
        self._loaded[name] = cmd

    def __delitem__(self, name: str) -> None:
        if self._lazy.pop(name, None) is None:
            del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        yield from list(self._loaded)
        yield from list(self._lazy)

    def __len__(self) -> int:
        return len(self._loaded) + len(self._lazy)


class LazyGroup(TyperGroup):
    """A Typer group whose subcommands in `LAZY` load when first looked up (subclass, set LAZY)."""

    LAZY: ClassVar[list[Lazy]] = []

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(self.commands, self.LAZY)


def lazy_group(entries: list[Lazy]) -> type[TyperGroup]:
    """A LazyGroup class over `entries` (pass it as `typer.Typer(cls=...)`); the list may grow
    until the command line is parsed (`coloco_cli.main` adds `demo`)."""
    return type("ColocoGroup", (LazyGroup,), {"LAZY": entries})
