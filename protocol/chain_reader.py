"""Read-only contract calls over plain JSON-RPC, for commands that only read the chain.

`ChainReader` offers the typed views of :class:`protocol.chain_views.ChainViews` (``claimed``,
``token_balance``, ``stake_manager``, ...) with ``call`` made of one ``eth_call``, from the same
ABIs as :class:`protocol.chain.ChainClient` (`protocol.deployment.abi`). It never imports web3,
whose import alone took over a second of `coloco rewards show`, and encodes static types itself
(eth_abi, imported for strings, bytes and dynamic arrays, costs a few tenths more); anything
that sends, or reads events, takes a ChainClient.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import httpx

from protocol.chain_views import ChainViews
from protocol.deployment import Deployment, abi, available_abis
from protocol.eip712 import keccak256, to_checksum_address
from protocol.errors import ChainError, DeploymentError, RpcUnavailableError
from protocol.reverts import ErrorDecoder, abi_type

log = logging.getLogger(__name__)

_WORD = 32


def _static(kind: str) -> bool:
    """Whether ``kind`` (canonical) is encoded in place: no string, bytes or T[] inside."""
    if kind.endswith("[]") or kind in ("string", "bytes"):
        return False
    if kind.endswith("]"):
        return _static(kind[: kind.rindex("[")])
    if kind.startswith("("):
        return all(_static(k) for k in _split(kind[1:-1]))
    return True


def _encode(kind: str, value: Any) -> bytes:
    """One static value's ABI encoding (32 bytes a word)."""
    if kind.endswith("]"):
        inner = kind[: kind.rindex("[")]
        return b"".join(_encode(inner, v) for v in value)
    if kind.startswith("("):
        parts = _split(kind[1:-1])
        return b"".join(_encode(k, v) for k, v in zip(parts, value, strict=True))
    if kind == "address":
        return bytes(12) + bytes.fromhex(str(value).removeprefix("0x"))
    if kind == "bool":
        return int(bool(value)).to_bytes(_WORD, "big")
    if kind.startswith("uint"):
        return int(value).to_bytes(_WORD, "big")
    if kind.startswith("int"):
        return int(value).to_bytes(_WORD, "big", signed=True)
    if kind.startswith("bytes"):
        raw = bytes(value)
        if len(raw) != int(kind[5:]):
            raise ChainError(f"{kind} argument is {len(raw)} bytes long")
        return raw.ljust(_WORD, b"\0")
    raise ChainError(f"ABI type {kind} is not a static type")


def _decode(kind: str, data: bytes, at: int) -> tuple[Any, int]:
    """One static value from ``data`` at offset ``at``, as web3 returns it (addresses
    checksummed); and the offset after it."""
    if kind.endswith("]"):
        inner, count = kind[: kind.rindex("[")], int(kind[kind.rindex("[") + 1 : -1])
        items = []
        for _ in range(count):
            item, at = _decode(inner, data, at)
            items.append(item)
        return items, at
    if kind.startswith("("):
        fields = []
        for part in _split(kind[1:-1]):
            item, at = _decode(part, data, at)
            fields.append(item)
        return tuple(fields), at
    word = data[at : at + _WORD]
    if len(word) != _WORD:
        raise ChainError(f"the call returned {len(data)} bytes: too short for {kind}")
    at += _WORD
    if kind == "address":
        return to_checksum_address(word[12:]), at
    if kind == "bool":
        return word[-1] == 1, at
    if kind.startswith("uint"):
        return int.from_bytes(word, "big"), at
    if kind.startswith("int"):
        return int.from_bytes(word, "big", signed=True), at
    return word[: int(kind[5:])], at  # bytesN


def _checksummed(kind: str, value: Any) -> Any:
    """eth_abi's decoded value as web3 returns it: addresses checksummed, also inside tuples and
    arrays (``kind`` is the canonical type, e.g. ``(address,uint256)[]``)."""
    if kind.endswith("]"):
        inner = kind[: kind.rindex("[")]
        return [_checksummed(inner, v) for v in value]
    if kind.startswith("("):
        parts = _split(kind[1:-1])
        return tuple(_checksummed(k, v) for k, v in zip(parts, value, strict=True))
    if kind == "address":
        return to_checksum_address(value)
    return value


def encode_args(types: list[str], values: list[Any]) -> bytes:
    """The ABI encoding of a call's arguments: static types here, others through eth_abi (whose
    import costs start-up, and whose dynamic-type encoding is not repeated here)."""
    if all(_static(k) for k in types):
        return b"".join(_encode(k, v) for k, v in zip(types, values, strict=True))
    from eth_abi.abi import encode as abi_encode

    return bytes(abi_encode(types, values))


def decode_result(types: list[str], data: bytes) -> list[Any]:
    """A call's return values, as web3 gives them (addresses checksummed)."""
    if all(_static(k) for k in types):
        out, at = [], 0
        for kind in types:
            value, at = _decode(kind, data, at)
            out.append(value)
        return out
    from eth_abi.abi import decode as abi_decode

    values = abi_decode(types, data)
    return [_checksummed(k, v) for k, v in zip(types, values, strict=True)]


def _split(types: str) -> list[str]:
    """`uint256,(address,bool),bytes32` -> its top-level types."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(types):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(types[start:i])
            start = i + 1
    if types:
        out.append(types[start:])
    return out


class ChainReader(ChainViews):
    """View calls of the deployment's contracts on `rpc_url`, without web3."""

    def __init__(self, rpc_url: str, deployment: Deployment, *, timeout_s: float = 10.0) -> None:
        self.rpc_url = rpc_url
        self.deployment = deployment
        self._http = httpx.Client(timeout=timeout_s)
        self._ids = itertools.count(1)
        self._errors: ErrorDecoder | None = None

    def __repr__(self) -> str:
        return f"ChainReader({self.rpc_url!r}, chain_id={self.deployment.chain_id})"

    def rpc(self, method: str, params: list[Any]) -> Any:
        """One JSON-RPC request; its `result`, or the error object raised as ChainError."""
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        try:
            resp = self._http.post(self.rpc_url, json=body)
            answer = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise RpcUnavailableError(
                f"RPC {self.rpc_url} did not answer {method} ({type(exc).__name__}: {exc}); "
                "check that the node is running and --rpc-url / COLOCO_RPC_URL points at it"
            ) from exc
        if not isinstance(answer, dict) or ("result" not in answer and "error" not in answer):
            raise RpcUnavailableError(
                f"{self.rpc_url} answered {method} with HTTP {resp.status_code} and no JSON-RPC "
                "result: is --rpc-url / COLOCO_RPC_URL a chain's RPC endpoint?"
            )
        if "error" in answer:
            raise _RpcError(answer["error"])
        return answer["result"]

    def call(self, contract: str, fn: str, *args: Any, block: int | str = "latest") -> Any:
        """A view call; a revert becomes ContractRevertError (as ChainClient.call)."""
        item = self._function(contract, fn, len(args))
        inputs = [abi_type(p) for p in item.get("inputs", [])]
        outputs = [abi_type(p) for p in item.get("outputs", [])]
        selector = keccak256(f"{fn}({','.join(inputs)})".encode())[:4]
        data = "0x" + (selector + encode_args(inputs, list(args))).hex()
        tag = hex(block) if isinstance(block, int) else block
        call = {"to": self.deployment.address(contract), "data": data}
        try:
            raw = self.rpc("eth_call", [call, tag])
        except _RpcError as exc:
            if exc.data is None:
                raise ChainError(f"{contract}.{fn}: the RPC refused the call: {exc}") from None
            raise self._decoder().decode(exc.data, context=f"{contract}.{fn}") from None
        out = decode_result(outputs, bytes.fromhex(str(raw).removeprefix("0x")))
        return out[0] if len(out) == 1 else out

    def _function(self, contract: str, fn: str, arity: int) -> dict[str, Any]:
        found = [
            item
            for item in abi(contract)
            if item.get("type") == "function"
            and item.get("name") == fn
            and len(item.get("inputs", [])) == arity
        ]
        if len(found) != 1:
            raise DeploymentError(
                f"{contract} has {len(found)} functions {fn} of {arity} argument(s) in its ABI "
                "(expected one): reinstall coloco or rebuild with `forge build`"
            )
        return found[0]

    def _decoder(self) -> ErrorDecoder:
        if self._errors is None:
            self._errors = ErrorDecoder(available_abis(self.deployment.contracts))
        return self._errors

    def close(self) -> None:
        self._http.close()


class _RpcError(Exception):
    """A JSON-RPC error object; `data` holds revert data when the node sent some."""

    def __init__(self, error: Any) -> None:
        error = error if isinstance(error, dict) else {"message": str(error)}
        super().__init__(str(error.get("message", error)))
        data = error.get("data")
        if isinstance(data, dict):  # some nodes nest it: {"data": {"data": "0x..."}}
            data = data.get("data")
        self.data: str | None = data if isinstance(data, str) and data.startswith("0x") else None
