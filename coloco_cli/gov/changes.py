"""Turn `--set inner-steps=30 --set outer-lr=0.5` into TrainingConfig setter calls.

Each name is a TrainingConfig field in kebab case (`inner-steps` = `innerSteps`), derived from
the one field list (reference.settings.TrainingSettings); the learning rates and momentum also
accept plain numbers (`inner-lr=0.001` = `innerLrE6=1000`), the mixture its name without
`-bps`. The setter that holds a field is found in the contract's ABI by its parameter names, and
the setter's other parameters keep their current on-chain values, so one `--set` changes exactly
one thing.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any

from coloco_cli.common import parse_amount
from protocol.errors import ConfigError
from protocol.types import TokenUnits, Wei
from reference.governed import param_field, set_names, show_arg
from reference.settings import TrainingSettings, WireFormat, to_e6

_OWNABLE = {"transferOwnership", "renounceOwnership"}


def _int(text: str, name: str) -> int:
    """'30', '0x1e', '100_000' or '1e8' -> an int (its range is checked in gov.bounds)."""
    clean = text.replace("_", "")
    try:
        return int(clean, 0)
    except ValueError:
        pass
    try:
        exact = Decimal(clean)
    except InvalidOperation:
        exact = Decimal("NaN")
    if not exact.is_finite() or exact != exact.to_integral_value():
        raise ConfigError(f"--set {name}={text!r}: expected a whole number, like 30 or 1e3")
    return int(exact)


def _e6(text: str, name: str) -> int:
    return to_e6(text, name=f"--set {name}")


def _wire(text: str, name: str) -> int:
    if text.lower() in WireFormat.labels():
        return int(WireFormat.parse(text))
    try:
        return _int(text, name)
    except ConfigError:
        raise ConfigError(
            f"--set {name}={text!r}: not a wire format; choose {', '.join(WireFormat.labels())} "
            f"(or its code: {WireFormat.codes()})"
        ) from None


def _tokens(text: str, name: str) -> int:
    return parse_amount(text, what=f"--set {name}")


def _mixture(text: str, name: str) -> list[int]:
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise ConfigError(f"--set {name}={text!r}: expected basis points like 7000,3000")
    return [_int(p.strip(), name) for p in parts]


def _bytes32(text: str, name: str) -> bytes:
    raw = bytes.fromhex(text.removeprefix("0x")) if len(text.removeprefix("0x")) == 64 else b""
    if len(raw) != 32:
        raise ConfigError(f"--set {name}={text!r}: expected 0x and 64 hex digits")
    return raw


Parser = Callable[[str, str], Any]
# unit suffixes a field also answers to without: inner-lr (a real number) beside inner-lr-e6
_SHORT = {"_e6": _e6, "_bps": _mixture}


def _parser(hint: Any) -> Parser:
    base = getattr(hint, "__supertype__", hint)
    if hint is WireFormat:
        return _wire
    if hint in (Wei, TokenUnits):
        return _tokens
    if typing.get_origin(base) is tuple:
        return _mixture
    if base is bytes:
        return _bytes32
    if base is str:
        return lambda text, name: text
    return _int


@cache
def known_fields() -> dict[str, tuple[str, Parser]]:
    """kebab name -> (struct field, parser): every member of TrainingConfig's struct, named as
    reference.governed.set_names names it; the field's type in the one field list
    (reference.settings.TrainingSettings) chooses the parser, a short name its unit's."""
    hints = typing.get_type_hints(TrainingSettings)
    return {
        kebab: (member, _SHORT[suffix] if suffix else _parser(hints[name]))
        for kebab, (member, name, suffix) in set_names().items()
    }


@dataclass(frozen=True)
class SetterCall:
    """One TrainingConfig setter with its full argument list."""

    function: str
    args: tuple[Any, ...]

    def describe(self) -> str:
        return f"{self.function}({', '.join(show_arg(a) for a in self.args)})"


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """['inner-steps=30'] -> {'innerSteps': 30}; unknown names list the known ones."""
    if not items:
        raise ConfigError(
            "nothing to change: pass at least one --set NAME=VALUE, e.g. inner-steps=30"
        )
    changes: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip().lower().replace("_", "-")
        if not sep or not value.strip():
            raise ConfigError(f"--set {item!r}: write NAME=VALUE, e.g. --set inner-steps=30")
        known = known_fields()
        if name not in known:
            raise ConfigError(
                f"--set {item!r}: unknown setting {name!r}; known: {', '.join(known)}"
            )
        field, parser = known[name]
        if field in changes:
            raise ConfigError(f"--set {item!r}: {field} is set twice")
        changes[field] = parser(value.strip(), name)
    return changes


def setter_calls(
    abi: Sequence[Mapping[str, Any]], current: Mapping[str, Any], changes: Mapping[str, Any]
) -> list[SetterCall]:
    """The setter calls that apply `changes` on top of `current` (field name -> value)."""
    setters = [
        item
        for item in abi
        if item.get("type") == "function"
        and item.get("stateMutability") == "nonpayable"
        and item["name"] not in _OWNABLE
    ]
    if "releasedCheckpoint" in changes and not (
        changes.get("releasedCheckpointURI") or current.get("releasedCheckpointURI")
    ):
        raise ConfigError(
            "a release names where to download it: add --set released-checkpoint-uri=URI "
            "(e.g. the ledger's /v1/blobs/<hash>)"
        )
    calls: dict[str, SetterCall] = {}
    for field in changes:
        owner = next(
            (s for s in setters if field in {param_field(i["name"]) for i in s["inputs"]}), None
        )
        if owner is None:
            raise ConfigError(f"TrainingConfig has no setter for {field}: it cannot be governed")
        if owner["name"] in calls:
            continue
        args = []
        for param in owner["inputs"]:
            key = param_field(param["name"])
            if key in changes:
                args.append(changes[key])
            elif key in current:
                args.append(current[key])
            else:
                raise ConfigError(
                    f"TrainingConfig.{owner['name']} needs {key}, which is not a config field"
                )
        calls[owner["name"]] = SetterCall(owner["name"], tuple(args))
    return list(calls.values())


def config_as_dict(abi: Sequence[Mapping[str, Any]], value: Sequence[Any]) -> dict[str, Any]:
    """`current()`'s returned tuple -> {component name: value}, using the ABI's output names."""
    fn = next(i for i in abi if i.get("type") == "function" and i.get("name") == "current")
    components = fn["outputs"][0]["components"]
    if isinstance(value, Mapping):
        return dict(value)
    return {c["name"]: v for c, v in zip(components, value, strict=True)}
