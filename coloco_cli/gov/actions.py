"""What a proposal does, read back from its calldata: `gov status` and `gov list` show it.

Each action's target is named by the deployment (`TrainingConfig`, `CodeRegistry`, ...) and its
calldata decoded with that contract's ABI. A TrainingConfig argument is shown as `--set` spells
it, in its unit (`inner-lr=0.003`, `min-stake=2 ETH`), through the same table `gov propose`
checks against (coloco_cli.gov.bounds.RANGES); any other argument as it is, bytes in hex.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from coloco_cli.gov.bounds import RANGES
from coloco_cli.gov.changes import kebab_of, param_field, show_arg
from protocol.errors import DeploymentError

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

_SHOW = {r.field: r.show for r in RANGES}


def _contract_at(chain: ChainClient, target: str) -> str | None:
    for name, address in chain.deployment.contracts.items():
        if str(address).lower() == target.lower():
            return name
    return None


def _value(contract: str, param: str, value: Any) -> str:
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
    paid = f" with {value} wei" if value else ""
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
