"""What `coloco market` does: parse human quantities, sign a ComputeOffer, talk to the ledger's
market endpoints (docs/ledger.md, "The compute market")."""

from __future__ import annotations

import re
import time
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

import httpx

from coloco_cli.ledger_http import NotALedgerError, ledger_get
from protocol.eip712 import Eip712Domain
from protocol.errors import ConfigError, EncodingError, LedgerError, LedgerUnavailableError
from protocol.offer import ComputeOffer, label_bytes32
from protocol.signing import sign_digest
from protocol.types import Address, Bytes32

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount

_SI = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15, "e": 10**18}
_BINARY = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)$")


def parse_quantity(text: str, *, what: str, unit: str) -> int:
    """'50T' or '50TFLOP/s' -> 5e13; '80GiB' -> 80 * 2^30; '1.5G' -> 1.5e9 (SI prefixes k M G T
    P E; binary KiB MiB GiB TiB; ``unit`` itself may follow: 'FLOP/s', 'bit/s', 'B')."""
    raw = text.strip().lower().replace(" ", "").removesuffix(unit.lower())
    match = _QUANTITY.match(raw)
    scale = None
    if match:
        suffix = match.group(2)
        scale = _BINARY.get(suffix) or _BINARY.get(suffix + "b") or _SI.get(suffix)
    if match is None or scale is None:
        raise ConfigError(
            f"{what} {text!r}: write a number with an optional prefix, e.g. 50T, 1.5G, 80GiB "
            f"(unit: {unit})"
        )
    try:
        value = Decimal(match.group(1)) * scale
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits numbers only
        raise ConfigError(f"{what} {text!r} is not a number") from exc
    if value != value.to_integral_value():
        raise ConfigError(f"{what} {text!r} is not a whole number of {unit}")
    return int(value)


def ledger_post(ledger_url: str, path: str, body: Any, *, timeout: float = 30.0) -> Any:
    """POST JSON to the ledger: its answer, or LedgerError with the ledger's code and message."""
    url = f"{ledger_url.rstrip('/')}{path}"
    try:
        resp = httpx.post(url, json=body, timeout=timeout)
    except httpx.HTTPError as exc:
        raise LedgerUnavailableError(
            f"ledger at {ledger_url} does not answer ({exc.__class__.__name__}): check "
            "--ledger-url or start one with `coloco ledger serve`"
        ) from exc
    try:
        data = resp.json()
    except ValueError:
        data = None
    if resp.status_code < 300 and isinstance(data, dict):
        return data
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and "code" in error:
        raise LedgerError(f"the ledger refused: {error.get('message')}", code=str(error["code"]))
    raise NotALedgerError(
        f"{ledger_url} is not a coloco ledger (POST {path} answered HTTP {resp.status_code}): "
        "point --ledger-url at `coloco ledger serve`'s address"
    )


def domain(ledger_url: str) -> Eip712Domain:
    """The EIP-712 domain the ledger takes signatures in (GET /v1/eip712)."""
    data = ledger_get(ledger_url, "/v1/eip712", expect=("domain",)).json()
    return Eip712Domain.from_json(data["domain"])


def list_offers(ledger_url: str, params: dict[str, Any]) -> dict[str, Any]:
    query = {k: v for k, v in params.items() if v is not None}
    resp = ledger_get(
        ledger_url, f"/v1/market/offers?{httpx.QueryParams(query)}", expect=("offers",)
    )
    data: dict[str, Any] = resp.json()
    if resp.status_code != 200:
        err = data["error"]
        raise LedgerError(f"the ledger refused: {err['message']}", code=err["code"])
    return data


def next_nonce(ledger_url: str, node: str) -> int:
    """One above the node's current offer's nonce (1 when it has none)."""
    found = list_offers(ledger_url, {"node": node, "include_expired": "true", "limit": 1})
    offers = found["offers"]
    return int(offers[0]["nonce"]) + 1 if offers else 1


def post_offer(ledger_url: str, signer: LocalAccount, fields: dict[str, Any]) -> dict[str, Any]:
    """Sign ``fields`` (the offer's, but ``node``, ``nonce`` and ``expiry`` when absent) with the
    node's key and post it; the ledger's answer and the offer."""
    node = Address(signer.address)
    values = {"node": node, **fields}
    if values.get("nonce") is None:
        values["nonce"] = next_nonce(ledger_url, node)
    try:
        offer = ComputeOffer(**values)
    except EncodingError as exc:
        raise ConfigError(f"offer: {exc}") from exc
    dom = domain(ledger_url)
    signature = sign_digest(offer.digest(dom), bytes(signer.key))
    answer = ledger_post(
        ledger_url,
        "/v1/market/offers",
        {"offer": offer.to_json(), "signature": "0x" + signature.hex()},
    )
    return {**answer, "offer": offer.to_json()}


def label(text: str, what: str) -> Bytes32:
    try:
        return label_bytes32(text, what)
    except EncodingError as exc:
        raise ConfigError(str(exc)) from exc


def expiry_in(seconds: int) -> int:
    return int(time.time()) + seconds
