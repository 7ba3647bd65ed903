"""What TrainingConfig will accept, checked before a proposal is sent.

A mistake found at `gov execute` costs a whole voting period and the Timelock delay, so `gov
propose` checks each change first, in two layers:

1. `RANGES` (reference.governed, shared with the dashboard): each governed field's allowed
   range, its unit and how to show a value. Every upper bound is the contract's own public
   constant, read through the ABI from the chain
   (`MAX_INNER_STEPS`, `MOMENTUM_ONE_E6`, ...), and a field with no constant is bounded by its
   setter parameter's ABI type (`uint32`, `uint16`); only the lower bounds (the setters' `== 0`
   tests) are written here, and tests/integration/test_gov_bounds.py probes both edges of every
   range against the deployed contract, so this table cannot drift from TrainingConfig.sol.
2. `simulate`: each setter call is run as an `eth_call` from the contract's owner (the Timelock),
   so whatever the contract would refuse at execute (any check the table does not describe) is
   refused now, with the decoded custom error.

Consequences the chain lets us compute (nodes a higher minimum stake deactivates, a zero reward)
are `warnings`. Every refusal names the `--set`, the value, the allowed range and the unit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from coloco_cli.common import fmt_units
from coloco_cli.gov.changes import SetterCall
from coloco_cli.logs import event_logs
from protocol.errors import ConfigError, ContractRevertError
from reference.governed import RANGES, kebab_of, param_field, show_arg

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

FORCE_HINT = "pass --force to propose anyway (the Timelock would then revert it at execute)"


MIXTURE_CONSTANTS = ("MAX_DATA_SOURCES", "BPS")


def constants(chain: ChainClient) -> dict[str, int]:
    """Every public constant the ranges name, read from the deployed TrainingConfig."""
    names = [r.constant for r in RANGES if r.constant] + list(MIXTURE_CONSTANTS)
    return {name: int(chain.call("TrainingConfig", name)) for name in names}


def _param_types(abi: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """struct field -> the ABI type of the setter parameter that sets it."""
    types: dict[str, str] = {}
    for item in abi:
        if item.get("type") == "function" and item.get("stateMutability") == "nonpayable":
            for param in item["inputs"]:
                types.setdefault(param_field(param["name"]), str(param["type"]))
    return types


def _type_max(abi_type: str) -> int:
    base = abi_type.removesuffix("[]")
    return (1 << int(base.removeprefix("uint") or 256)) - 1 if base.startswith("uint") else -1


def _refusal(field: str, shown: str, allowed: str, why: str = "out of range") -> str:
    return f"--set {kebab_of(field)}={shown}: {why}; TrainingConfig allows {allowed}"


def range_refusals(
    changes: Mapping[str, Any], consts: Mapping[str, int], abi: Sequence[Mapping[str, Any]]
) -> dict[str, str]:
    """struct field -> why its change is outside what the contract accepts (empty: all inside)."""
    types = _param_types(abi)
    out: dict[str, str] = {}
    for r in RANGES:
        if r.field not in changes:
            continue
        value = int(changes[r.field])
        high = r.high(consts, _type_max(types.get(r.field, "uint256")))
        if not r.low <= value <= high:
            where = f" ({r.constant})" if r.constant else ""
            allowed = f"{r.show(r.low)}..{r.show(high)}{where}, {r.unit}"
            out[r.field] = _refusal(r.field, r.show(value), allowed)
    if "dataMixtureBps" in changes:
        part_max = _type_max(types.get("dataMixtureBps", "uint16"))
        refusal = _mixture_refusal(list(changes["dataMixtureBps"]), consts, part_max)
        if refusal:
            out["dataMixtureBps"] = refusal
    return out


def _encodable(value: Any, abi_type: str) -> bool:
    """Whether `value` fits the setter parameter's ABI type (else not even --force can send)."""
    if isinstance(value, list | tuple):
        return all(_encodable(v, abi_type.removesuffix("[]")) for v in value)
    if isinstance(value, int) and abi_type.startswith("uint"):
        return 0 <= value <= _type_max(abi_type)
    return True


def _mixture_refusal(parts: list[int], consts: Mapping[str, int], part_max: int) -> str | None:
    bps, sources = consts["BPS"], consts["MAX_DATA_SOURCES"]
    allowed = (
        f"1..{sources} sources (MAX_DATA_SOURCES) of 0..{part_max} basis points each, "
        f"summing to exactly {bps} (BPS = 100%), e.g. 7000,3000"
    )
    shown = ",".join(str(p) for p in parts)
    if not 1 <= len(parts) <= sources:
        return _refusal("dataMixtureBps", shown, allowed, f"{len(parts)} sources")
    if any(not 0 <= p <= part_max for p in parts):
        return _refusal("dataMixtureBps", shown, allowed, "a share is out of range")
    if sum(parts) != bps:
        return _refusal("dataMixtureBps", shown, allowed, f"sums to {sum(parts)}, not {bps}")
    return None


def simulate(chain: ChainClient, calls: Sequence[SetterCall]) -> list[str]:
    """Run each setter call as the Timelock would at execute (an eth_call from the owner);
    one message per call the contract refuses."""
    config = chain.contract("TrainingConfig")
    owner = str(chain.call("TrainingConfig", "owner"))
    out: list[str] = []
    for c in calls:
        func = config.get_function_by_name(c.function)(*c.args)
        try:
            chain.rpc(partial(func.call, {"from": owner}), f"TrainingConfig.{c.function}")
        except ContractRevertError as exc:
            args = ", ".join(show_arg(a) for a in exc.error_args)
            out.append(
                f"{c.describe()} would revert at execute with {exc.error_name or exc.message}"
                f"({args})"
            )
    return out


def active_stakes(chain: ChainClient) -> dict[str, int]:
    """Every currently active node -> its stake in wei (from the StakeManager's logs)."""
    start = int(chain.deployment.deployment_block)
    nodes = {str(ev.args.node) for ev in event_logs(chain, "StakeManager", "NodeRegistered",
                                                       from_block=start)}  # fmt: skip
    nodes |= {
        str(ev.args.newNode)
        for ev in event_logs(chain, "StakeManager", "NodeKeyRotated", from_block=start)
    }
    stakes: dict[str, int] = {}
    for node in sorted(nodes):
        if chain.call("StakeManager", "isActive", node):
            stakes[node] = int(chain.call("StakeManager", "nodes", node)[2])
    return stakes


def warnings(chain: ChainClient, changes: Mapping[str, Any]) -> list[str]:
    """Consequences of `changes` that the chain lets us count before the vote."""
    out: list[str] = []
    if "minStake" in changes:
        new = int(changes["minStake"])
        stakes = active_stakes(chain)
        below = sorted(node for node, staked in stakes.items() if staked < new)
        if below:
            lowest = min(stakes[n] for n in below)
            out.append(
                f"--set min-stake={fmt_units(new)}: {len(below)} of the {len(stakes)} active "
                f"nodes stake less (lowest {fmt_units(lowest)} ETH) and would drop out of "
                f"training when it executes: {', '.join(below)}"
            )
    if "rewardPerRound" in changes and int(changes["rewardPerRound"]) == 0:
        out.append(
            "--set reward-per-round=0: no round would pay anyone (compute, code or capital) "
            "from the moment it executes"
        )
    return out


def check(
    chain: ChainClient, changes: Mapping[str, Any], calls: Sequence[SetterCall], *, force: bool
) -> None:
    """Refuse (ConfigError, before anything is sent) what TrainingConfig would revert, or what
    `warnings` finds, unless `force` (then each is logged as a warning and the caller proposes).
    A value its ABI type cannot hold (a negative step count) is refused even with `force`."""
    consts = constants(chain)
    abi = chain.contract("TrainingConfig").abi
    types = _param_types(abi)
    refusals = range_refusals(changes, consts, abi)
    unsendable = [
        msg for f, msg in refusals.items() if not _encodable(changes[f], types.get(f, "uint256"))
    ]
    if unsendable:
        raise ConfigError("nothing was proposed:\n  " + "\n  ".join(unsendable))
    problems = list(refusals.values()) or simulate(chain, calls)
    problems += warnings(chain, changes)
    if not problems:
        return
    if force:
        for p in problems:
            log.warning("proposing anyway (--force): %s", p)
        return
    raise ConfigError("nothing was proposed:\n  " + "\n  ".join(problems) + f"\n{FORCE_HINT}")
