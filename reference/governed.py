"""TrainingConfig's governed fields as people name and read them, and what a proposal does.

One definition shared by `coloco gov` (which checks `--set` values against `RANGES` before a
proposal is sent, and decodes proposals in `gov status` / `gov list`) and the ledger's dashboard
(which shows each proposal's actions): the `--set` name of each struct member (`inner-lr` for
`innerLrE6`, from reference.settings.TrainingSettings), each scalar field's allowed range and
unit (upper bounds are the contract's own public constants, read from the chain by the CLI), and
`describe_action`, which names a proposal action's contract and decodes its calldata, showing
TrainingConfig values in their units (`inner-lr=0.003`, `min-stake=2 ETH`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING, Any

from protocol.abi_struct import outputs, snake_case
from protocol.display import units
from protocol.errors import DeploymentError
from reference.settings import TrainingSettings, WireFormat

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

SHORT_SUFFIXES = ("_e6", "_bps")
"""Unit suffixes a field also answers to without: inner-lr (a real number) beside inner-lr-e6."""


def _e6(value: int) -> str:
    return format((Decimal(value) / Decimal(10**6)).normalize(), "f")


def _wire(value: int) -> str:
    try:
        return f"{value} ({WireFormat(value).label})"
    except ValueError:
        return str(value)


@dataclass(frozen=True)
class Range:
    """One governed field: `low`..the top the contract allows, in the field's stored units."""

    field: str  # the TrainingConfig struct member (ABI spelling)
    low: int  # the setter's own lower test (`== 0` -> 1)
    constant: str | None  # the contract's public constant holding the top, if any
    unit: str
    show: Callable[[int], str] = str
    exclusive: bool = False  # the constant itself is refused (momentum < MOMENTUM_ONE_E6)

    def high(self, constants: Mapping[str, int], type_max: int) -> int:
        if self.constant is None:
            return type_max
        top = constants[self.constant]
        return top - 1 if self.exclusive else top


RANGES: tuple[Range, ...] = (
    Range("innerSteps", 1, "MAX_INNER_STEPS", "inner steps per round"),
    Range("innerLrE6", 1, "MAX_INNER_LR_E6", "learning rate (at most 6 decimals)", _e6),
    Range("traceInterval", 1, "MAX_TRACE_INTERVAL", "inner steps between committed states"),
    Range("outerLrE6", 1, "MAX_OUTER_LR_E6", "learning rate (at most 6 decimals)", _e6),
    Range(
        "outerMomentumE6", 0, "MOMENTUM_ONE_E6", "momentum, below 1 (at most 6 decimals)", _e6, True
    ),
    Range("wireFormat", 0, "MAX_WIRE_FORMAT", f"wire format: {WireFormat.codes()}", _wire),
    Range("maxNodes", 1, "MAX_NODES", "nodes per round"),
    Range("minStake", 1, None, "ETH of stake per node", lambda v: f"{units(v)} ETH"),
    Range(
        "rewardPerRound",
        0,
        "MAX_REWARD_PER_ROUND",
        "CMS minted per round",
        lambda v: f"{units(v)} CMS",
    ),
)
"""Scalar fields; the data mixture (a list) and a released checkpoint are checked by the CLI
(coloco_cli.gov.bounds) and by the contract."""

_SHOW = {r.field: r.show for r in RANGES}

# setter parameters named otherwise than the struct field they set
_PARAM_FIELDS = {"checkpoint": "releasedCheckpoint", "uri": "releasedCheckpointURI"}


def param_field(param: str) -> str:
    """A setter parameter's name -> the struct field it sets (`minStake_` -> `minStake`)."""
    name = param.strip("_")
    return _PARAM_FIELDS.get(name, name)


@cache
def set_names() -> dict[str, tuple[str, str, str | None]]:
    """kebab name -> (struct member, TrainingSettings field, unit suffix the name drops or None):
    every member of TrainingConfig's struct, from the one field list and the ABI's spelling."""
    (config,) = outputs("TrainingConfig", "current")
    member = {snake_case(c["name"]): str(c["name"]) for c in config["components"]}
    names: dict[str, tuple[str, str, str | None]] = {}
    for f in dataclasses.fields(TrainingSettings):
        if f.name not in member:  # version(): not a member, set by every setter
            continue
        kebab = f.name.replace("_", "-")
        for suffix in SHORT_SUFFIXES:
            if f.name.endswith(suffix):
                short = kebab.removesuffix(suffix.replace("_", "-"))
                names[short] = (member[f.name], f.name, suffix)
        names[kebab] = (member[f.name], f.name, None)
    return names


def kebab_of(field: str) -> str:
    """A struct field -> the shortest `--set` name for it (`innerLrE6` -> `inner-lr`)."""
    names = [kebab for kebab, (f, _, _) in set_names().items() if f == field]
    return min(names, key=len) if names else field


def show_arg(value: Any) -> str:
    """A call argument as a person reads it: bytes as 0x hex, not a Python bytes repr."""
    return "0x" + value.hex() if isinstance(value, bytes) else str(value)


def _contract_at(chain: ChainClient, target: str) -> str | None:
    for name, address in chain.deployment.contracts.items():
        if str(address).lower() == target.lower():
            return name
    return None


_UNITS: dict[tuple[str, str], Callable[[int], str]] = {
    ("CodeRegistry", "amount"): lambda v: f"{units(v)} CMS",
    ("CodeRegistry", "capacity"): lambda v: f"{units(v)} CMS",
    ("CodeRegistry", "threshold"): lambda v: f"{units(v)} CMS",
    ("RunFunding", "ethPerRound"): lambda v: f"{units(v)} ETH",
    ("RunFunding", "capacity"): lambda v: f"{units(v)} CMS",
    ("StakeManager", "amount"): lambda v: f"{units(v)} ETH",
}
"""Amounts of the other contracts' setters, in their units (CMS or ETH, 18 decimals)."""


def _value(contract: str, param: str, value: Any) -> str:
    unit = _UNITS.get((contract, param.strip("_")))
    if unit is not None and isinstance(value, int):
        return f"{param}={unit(value)}"
    if contract == "TrainingConfig":
        field = param_field(param)
        if field in _SHOW:
            return f"{kebab_of(field)}={_SHOW[field](int(value))}"
        if isinstance(value, list | tuple):
            return f"{kebab_of(field)}={','.join(str(v) for v in value)}"
        return f"{kebab_of(field)}={show_arg(value)}"
    return f"{param}={show_arg(value)}"


def describe_action(chain: ChainClient, target: str, calldata: bytes, value: int = 0) -> str:
    """'TrainingConfig.setInnerLoop(inner-steps=30, inner-lr=0.003)' for one proposal action."""
    name = _contract_at(chain, target)
    paid = f" with {units(value)} ETH" if value else ""
    if name is None:
        return f"call {target} with 0x{calldata.hex()}{paid} (not a contract of this deployment)"
    try:
        fn, args = chain.contract(name).decode_function_input(calldata)
    except (ValueError, DeploymentError) as exc:
        log.debug("cannot decode a %s action: %s", name, exc)
        return f"{name} with 0x{calldata.hex()}{paid} (calldata its ABI does not decode)"
    shown = ", ".join(_value(name, k, v) for k, v in args.items())
    return f"{name}.{fn.fn_name}({shown}){paid}"


def describe_actions(
    chain: ChainClient, targets: Sequence[str], calldatas: Sequence[bytes], values: Sequence[int]
) -> list[str]:
    return [
        describe_action(chain, t, c, v) for t, c, v in zip(targets, calldatas, values, strict=True)
    ]
