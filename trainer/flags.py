"""A typed tree of options as a typer command: flags derived from the tree, the tree from the flags.

An options tree is a dataclass whose fields are leaves or groups. A leaf is one flag, declared
once beside its field as ``Annotated[T, typer.Option(help=...)] = default`` (``--field-name``);
a group is another such dataclass (one concern: the node's key, its network...), with a default
when every leaf in it has one. Leaf names are unique across the tree, so the command line stays
flat while the code reads the tree::

    command = TreeCommand(NodeOptions, run)  # run(options: NodeOptions) -> None
    app.command("run")(command)              # --run-id, --keystore, ... in the tree's order

Typer reads a command's parameters from its signature; :class:`TreeCommand` presents the
leaves as that signature and fills the tree from what typer parsed, so no command lists its
flags again and no value passes through an untyped bag.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from protocol.errors import TrainerError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Tree = TypeVar("Tree", bound="DataclassInstance")


def _group(hint: object) -> type[DataclassInstance] | None:
    """The group type a field's hint names, or None for a leaf."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    return None


def _fields(tree: type[DataclassInstance]) -> list[tuple[dataclasses.Field[Any], Any]]:
    hints = typing.get_type_hints(tree, include_extras=True)
    return [(f, hints[f.name]) for f in dataclasses.fields(tree)]


def parameters(tree: type[DataclassInstance]) -> list[inspect.Parameter]:
    """The tree's leaves as keyword-only parameters, depth first in declaration order."""
    out: list[inspect.Parameter] = []
    for f, hint in _fields(tree):
        group = _group(hint)
        if group is not None:
            out.extend(parameters(group))
            continue
        default: object = inspect.Parameter.empty
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=hint,
                                     default=default))  # fmt: skip
    names = [p.name for p in out]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise TrainerError(f"{tree.__name__}: leaves {repeated} appear twice (one flag each)")
    return out


def fill(tree: type[Tree], flags: Mapping[str, Any]) -> Tree:
    """The tree whose leaves hold ``flags`` (leaf name -> parsed value)."""
    values: dict[str, Any] = {}
    for f, hint in _fields(tree):
        group = _group(hint)
        values[f.name] = flags[f.name] if group is None else fill(group, flags)
    return tree(**values)


class TreeCommand(Generic[Tree]):
    """A typer command whose flags are the leaves of ``tree`` and whose body takes it filled."""

    def __init__(self, tree: type[Tree], body: Callable[[Tree], None]) -> None:
        self.tree = tree
        self.body = body
        leaves = parameters(tree)
        self.__signature__ = inspect.Signature(leaves)
        self.__annotations__ = {p.name: p.annotation for p in leaves}
        self.__name__ = body.__name__
        self.__doc__ = body.__doc__

    def __call__(self, **flags: Any) -> None:
        self.body(fill(self.tree, flags))
