"""GET a coloco ledger's JSON, telling a ledger that refuses from something that is no ledger.

A coloco ledger answers every request with JSON: the resource, or `{"error": {"code",
"message"}}` (ledger.api.errors). A chain's RPC, or any other web server, at `--ledger-url`
answers otherwise (anvil: 404 with an empty body), and the command says so instead of reading
that answer as "nothing here for you" (`coloco rewards show` once said "nothing to claim yet").
"""

from __future__ import annotations

from typing import Any

import httpx

from protocol.errors import LedgerError, LedgerUnavailableError


class NotALedgerError(LedgerError):
    """The server at --ledger-url answers, but not as a coloco ledger."""

    code = "not_a_ledger"


def ledger_get(
    ledger_url: str, path: str, *, expect: tuple[str, ...] = (), timeout: float = 10.0
) -> httpx.Response:
    """GET `ledger_url` + `path`: the response when it is a coloco ledger's answer (a 200 holding
    the keys in `expect`, or the ledger's error object); raises LedgerUnavailableError when
    nothing answers, NotALedgerError when something else does."""
    url = f"{ledger_url.rstrip('/')}{path}"
    try:
        resp = httpx.get(url, timeout=timeout)
    except httpx.HTTPError as exc:
        raise LedgerUnavailableError(
            f"ledger at {ledger_url} does not answer ({exc.__class__.__name__}): check "
            "--ledger-url or start one with `coloco ledger serve`"
        ) from exc
    if not _ledger_answer(resp, expect):
        kind = resp.headers.get("content-type") or "no content type"
        raise NotALedgerError(
            f"{ledger_url} is not a coloco ledger (GET {path} answered HTTP {resp.status_code}, "
            f"{kind}, {len(resp.content)} bytes): point --ledger-url (or COLOCO_LEDGER_URL) at "
            "`coloco ledger serve`'s address, not the chain's RPC"
        )
    return resp


def _ledger_answer(resp: httpx.Response, expect: tuple[str, ...]) -> bool:
    try:
        body: Any = resp.json()
    except ValueError:
        return False
    if resp.status_code == 200:
        if isinstance(body, dict):
            return all(key in body for key in expect)
        return isinstance(body, list) and not expect
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and "code" in error
