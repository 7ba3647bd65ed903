"""Turn revert data into :class:`ContractRevertError` carrying the custom error's name and args.

The 4-byte selector is looked up among every custom error declared in the loaded ABIs, plus
Solidity's built-in ``Error(string)`` and ``Panic(uint256)``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from protocol.eip712 import keccak256, to_checksum_address
from protocol.errors import ContractRevertError

PANIC_CODES: Final[dict[int, str]] = {
    0x01: "assert failed",
    0x11: "arithmetic overflow or underflow",
    0x12: "division by zero",
    0x21: "invalid enum value",
    0x22: "bad storage byte array",
    0x31: "pop on empty array",
    0x32: "array index out of bounds",
    0x41: "out of memory",
    0x51: "call to an uninitialised function",
}


def abi_type(param: dict[str, Any]) -> str:
    """The canonical ABI type of a parameter, tuples expanded (``(uint256,address)[]``)."""
    kind = str(param["type"])
    if kind.startswith("tuple"):
        inner = ",".join(abi_type(c) for c in param.get("components", []))
        return f"({inner}){kind[len('tuple') :]}"
    return kind


class ErrorDecoder:
    """Selector -> (name, input types, input names) for every custom error of some ABIs."""

    def __init__(self, abis: Iterable[list[dict[str, Any]]]) -> None:
        self._errors: dict[bytes, tuple[str, list[str], list[str]]] = {
            bytes.fromhex("08c379a0"): ("Error", ["string"], ["reason"]),
            bytes.fromhex("4e487b71"): ("Panic", ["uint256"], ["code"]),
        }
        for abi in abis:
            for item in abi:
                if item.get("type") != "error":
                    continue
                types = [abi_type(p) for p in item.get("inputs", [])]
                names = [str(p.get("name", "")) for p in item.get("inputs", [])]
                signature = f"{item['name']}({','.join(types)})"
                self._errors[keccak256(signature.encode())[:4]] = (item["name"], types, names)

    def decode(self, data: bytes | str | None, *, context: str) -> ContractRevertError:
        """The exception for revert ``data`` (hex or bytes) raised by ``context``."""
        raw = _as_bytes(data)
        if len(raw) < 4:
            return ContractRevertError(
                f"{context} reverted without a reason (no custom error data)",
                error_name=None,
            )
        known = self._errors.get(raw[:4])
        if known is None:
            return ContractRevertError(
                f"{context} reverted with unknown error selector 0x{raw[:4].hex()} "
                f"(not in the loaded ABIs: rebuild with `forge build`?)",
                error_name=None,
            )
        name, types, names = known
        # eth_abi costs start-up: read-only commands import this module, few of them see a revert
        from eth_abi.abi import decode as abi_decode
        from eth_abi.exceptions import DecodingError

        try:
            args = tuple(
                to_checksum_address(a) if t == "address" else a
                for t, a in zip(types, abi_decode(types, raw[4:]), strict=True)
            )
        except (DecodingError, ValueError, OverflowError) as exc:
            return ContractRevertError(
                f"{context} reverted with {name} but its arguments do not decode ({exc})",
                error_name=name,
            )
        shown = ", ".join(show_args(names, args))
        message = f"{context} reverted: {name}({shown})"
        if name == "Panic" and isinstance(args[0], int):
            message += f" [{PANIC_CODES.get(args[0], 'unknown panic')}]"
        return ContractRevertError(
            message, error_name=name, error_args=args, error_arg_names=tuple(names)
        )


# a custom error's argument with such a name is a unix time (`RootPending.finalizesAt`,
# `RunEnded.fundingEnd`, `VestingNotStarted.now_`, `RefundPending.pendingUntil`, ...)
_TIME_ARG = re.compile(r"(At|End|end|now_|Until)$")


def show_args(names: Sequence[str], args: Sequence[object]) -> list[str]:
    """A custom error's arguments as a person reads them: `name=` where the ABI names one, bytes
    as 0x hex (never a Python bytes repr), unix times in UTC."""
    names = list(names) or [""] * len(args)
    shown = []
    for name, value in zip(names, args, strict=False):
        if isinstance(value, bytes):
            text = "0x" + value.hex()
        elif isinstance(value, int) and name and _TIME_ARG.search(name) and value > 0:
            text = datetime.fromtimestamp(value, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        else:
            text = str(value)
        shown.append(f"{name}={text}" if name else text)
    return shown


def _as_bytes(data: bytes | str | None) -> bytes:
    if data is None:
        return b""
    if isinstance(data, bytes):
        return data
    text = data.removeprefix("0x")
    try:
        return bytes.fromhex(text)
    except ValueError:
        return b""
