"""A contract call's return values by name: what the ABI calls each one, never its position.

web3 hands back a Solidity struct as a bare tuple, so a caller that indexes it (``c[4]``) reads
the wrong field, silently, once the struct changes. Here each value is paired with the name the
ABI gives it (``{"innerSteps": 50, ...}``) and turned into a plain Python value (an address
checksummed, bytes as ``bytes``, an array as a tuple). :func:`as_dataclass` then builds a typed
record whose fields are those names in snake case, and refuses one that lacks a field the ABI
has or has one the ABI lacks, naming both: a Python mirror of a struct cannot drift from it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, TypeVar

from protocol.deployment import abi
from protocol.eip712 import to_checksum_address
from protocol.errors import DeploymentError
from protocol.types import Address

T = TypeVar("T")

_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(name: str) -> str:
    """A Solidity name in Python's spelling: ``innerLrE6`` -> ``inner_lr_e6``,
    ``releasedCheckpointURI`` -> ``released_checkpoint_uri``, ``forVotes`` -> ``for_votes``."""
    return _WORD.sub("_", name).lower()


@cache
def outputs(contract: str, fn: str) -> tuple[Mapping[str, Any], ...]:
    """The ABI's output parameters of ``contract.fn`` (the first function of that name)."""
    for item in abi(contract):
        if item.get("type") == "function" and item.get("name") == fn:
            return tuple(item["outputs"])
    raise DeploymentError(f"the {contract} ABI has no function {fn}: rebuild (`forge build`)")


def plain(param: Mapping[str, Any], value: Any) -> Any:
    """``value`` as web3 decoded it for ``param``, as a plain Python value: a struct becomes a
    dict by component name, an array a tuple, an address a checksummed :class:`Address`."""
    kind = str(param["type"])
    if kind.endswith("]"):
        inner = {**param, "type": kind[: kind.rindex("[")]}
        return tuple(plain(inner, v) for v in value)
    if kind == "tuple":
        return named(param["components"], value)
    if kind == "address":
        return Address(to_checksum_address(str(value)))
    if kind.startswith("bytes"):
        return bytes(value)
    if kind.startswith(("uint", "int")):
        return int(value)
    if kind == "bool":
        return bool(value)
    return value


def named(params: Sequence[Mapping[str, Any]], values: Sequence[Any]) -> dict[str, Any]:
    """``{ABI name: plain value}`` for a struct's components or a function's outputs."""
    if len(values) != len(params):
        raise DeploymentError(
            f"{len(values)} values for the {len(params)} parameters "
            f"{[p.get('name') for p in params]}: the ABI does not match the contract"
        )
    return {str(p["name"]): plain(p, v) for p, v in zip(params, values, strict=True)}


def returned(contract: str, fn: str, value: Any) -> dict[str, Any]:
    """What ``contract.fn`` returned (web3's decoding), by ABI name. A function that returns
    one struct gives that struct's components; several outputs give each by its name."""
    params = outputs(contract, fn)
    if len(params) == 1 and params[0]["type"] == "tuple":
        return named(params[0]["components"], value)
    return named(params, value if len(params) > 1 else (value,))


def as_dataclass(cls: type[T], values: Mapping[str, Any], *, where: str, **extra: Any) -> T:
    """``cls(**values)`` with each ABI name in snake case; ``extra`` fills fields that are not
    in the ABI's list (a ``version`` read by another call). The field names must be exactly
    the ABI's (DeploymentError naming the difference otherwise)."""
    given = {snake_case(k): v for k, v in values.items()} | extra
    wanted = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    if set(given) != set(wanted):
        raise DeploymentError(
            f"{where} returns {sorted(set(given) - set(extra))} but {cls.__qualname__} has "
            f"{sorted(set(wanted) - set(extra))}: missing {sorted(set(wanted) - set(given))}, "
            f"unexpected {sorted(set(given) - set(wanted))}; rebuild the ABI (`forge build`) "
            f"or update {cls.__module__}.{cls.__qualname__}"
        )
    return cls(**given)
