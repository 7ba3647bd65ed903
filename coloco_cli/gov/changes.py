"""Turn `--set inner-steps=30 --set outer-lr=0.5` into TrainingConfig setter calls.

Each name is a TrainingConfig field in kebab case (`inner-steps` = `innerSteps`); the learning
rates and momentum also accept plain numbers (`inner-lr=0.001` = `innerLrE6=1000`). The setter
that holds a field is found in the contract's ABI by its parameter names, and the setter's other
parameters keep their current on-chain values, so one `--set` changes exactly one thing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from coloco_cli.common import parse_amount
from protocol.errors import ConfigError
from reference.settings import WireFormat

_OWNABLE = {"transferOwnership", "renounceOwnership"}


def _int(text: str, name: str) -> int:
    try:
        return int(text.replace("_", ""), 0)
    except ValueError as exc:
        raise ConfigError(f"--set {name}={text!r}: expected a whole number") from exc


def _e6(text: str, name: str) -> int:
    try:
        value = Decimal(text) * 1_000_000
    except InvalidOperation as exc:
        raise ConfigError(f"--set {name}={text!r}: expected a number like 0.001") from exc
    if value != value.to_integral_value():
        raise ConfigError(f"--set {name}={text!r}: at most 6 decimal places")
    return int(value)


def _wire(text: str, name: str) -> int:
    if text in WireFormat.labels():
        return int(WireFormat.parse(text))
    return _int(text, name)


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


# kebab name -> (struct field, parser)
FIELDS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "inner-steps": ("innerSteps", _int),
    "inner-lr": ("innerLrE6", _e6),
    "inner-lr-e6": ("innerLrE6", _int),
    "outer-lr": ("outerLrE6", _e6),
    "outer-lr-e6": ("outerLrE6", _int),
    "outer-momentum": ("outerMomentumE6", _e6),
    "outer-momentum-e6": ("outerMomentumE6", _int),
    "wire-format": ("wireFormat", _wire),
    "max-nodes": ("maxNodes", _int),
    "min-stake": ("minStake", _tokens),
    "reward-per-round": ("rewardPerRound", _tokens),
    "data-mixture": ("dataMixtureBps", _mixture),
    "data-mixture-bps": ("dataMixtureBps", _mixture),
    "released-checkpoint": ("releasedCheckpoint", _bytes32),
    "released-checkpoint-uri": ("releasedCheckpointURI", lambda text, name: text),
}


@dataclass(frozen=True)
class SetterCall:
    """One TrainingConfig setter with its full argument list."""

    function: str
    args: tuple[Any, ...]

    def describe(self) -> str:
        return f"{self.function}({', '.join(str(a) for a in self.args)})"


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
        if name not in FIELDS:
            raise ConfigError(
                f"--set {item!r}: unknown setting {name!r}; known: {', '.join(FIELDS)}"
            )
        field, parser = FIELDS[name]
        if field in changes:
            raise ConfigError(f"--set {item!r}: {field} is set twice")
        changes[field] = parser(value.strip(), name)
    return changes


# setter parameters named otherwise than the struct field they set
_PARAM_FIELDS = {"checkpoint": "releasedCheckpoint", "uri": "releasedCheckpointURI"}


def _norm(param: str) -> str:
    name = param.strip("_")
    return _PARAM_FIELDS.get(name, name)


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
        owner = next((s for s in setters if field in {_norm(i["name"]) for i in s["inputs"]}), None)
        if owner is None:
            raise ConfigError(f"TrainingConfig has no setter for {field}: it cannot be governed")
        if owner["name"] in calls:
            continue
        args = []
        for param in owner["inputs"]:
            key = _norm(param["name"])
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
