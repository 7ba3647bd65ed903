"""One error shape for every 4xx/5xx: ``{"error": {"code", "message"}}``; and the body limit."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger.core.schemas import ErrorResponse
from ledger.core.secrets import redact
from ledger.intake.verify import HTTP_STATUS
from ledger.market.offers import HTTP_STATUS as MARKET_STATUS
from protocol.eip712 import wallet_safe
from protocol.errors import ChainError, ColocoError

log = logging.getLogger(__name__)

_STATUS = {
    **HTTP_STATUS,
    **MARKET_STATUS,
    "not_found": 404,
    "unauthorized": 401,
    "bad_blob": 422,
    "blob_hash_mismatch": 422,
    "blob_quota_exceeded": 413,
    "blob_disk_full": 507,
    "too_many_uploads": 429,
    "upload_timeout": 408,
    "conflicting_genesis": 409,
    "conflicting_name": 409,
    "encoding_error": 422,
    "not_yet_public": 403,
    "boundary_mismatch": 422,
    "boundary_late": 409,
    "bad_boundary": 422,
    "no_trace": 409,
    "unsupported_media_type": 415,
    "challenge_open": 409,
    "challenge_replayed": 409,
    "challenge_closed": 409,
    "challenge_late": 409,
}


_MEANS = {
    400: "malformed JSON (not RFC 8259 JSON; NaN and Infinity refused)",
    401: "admin token (or upload signature) missing or wrong",
    403: "refused for the sender: unregistered or unstaked node, signer mismatch, not public yet",
    404: "unknown to this ledger (run, round, checkpoint, blob)",
    408: "the body did not arrive in time",
    409: (
        "conflicts with the ledger's state (stale, closed or started round, other genesis, "
        "a name not the run's)"
    ),
    413: "body over the ledger's size or item limit",
    415: "unsupported content type: send application/json",
    422: "a field out of range or of the wrong form, a bad signature, a semantic refusal",
    429: "too many uploads in flight: retry later",
    503: "the chain is not indexed yet or unreachable, or the database is busy: retry",
    507: "the ledger's disk is full",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of the refusals an operation answers: each the one error shape
    (:class:`ErrorResponse`), with what it means. Every route declares its own (a route's
    statuses are what its schema says: tests/ledger/test_schema.py)."""
    return {status: {"model": ErrorResponse, "description": _MEANS[status]} for status in statuses}


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")


def allowed_methods(app: Any, scope: Scope) -> list[str]:
    """Every method some route serves at the request's path (asked of the app's routing, as a
    request would be): the ``Allow`` of a 405 (RFC 9110) lists them all, not only those of the
    first route that matched the path."""
    return [
        method
        for method in _METHODS
        if any(route.matches({**scope, "method": method})[0] == Match.FULL for route in app.routes)
    ]


# a datetime (stored in UTC) written in C as pydantic writes it: ISO 8601 ending in Z
_OPTIONS = orjson.OPT_STRICT_INTEGER | orjson.OPT_UTC_Z


class WalletSafeJSON(JSONResponse):
    """Every JSON body of the API: orjson (fast, refuses NaN like the parser), integers beyond
    2^53 - 1 as decimal strings (JavaScript's JSON.parse would round them; wallets read both).

    orjson checks the 53-bit bound itself (``OPT_STRICT_INTEGER``), in C: only a body that
    really holds a bigger integer (or a non-string key) is walked by :func:`wallet_safe` in
    Python, which cost half the CPU of a run's rounds (81 KB of JSON) when done every time."""

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content, option=_OPTIONS)
        except orjson.JSONEncodeError:  # an integer beyond 2^53 - 1 (or a non-str key)
            return orjson.dumps(wallet_safe(content), option=orjson.OPT_UTC_Z)


def json_response(data: Any, status: int = 200) -> Response:
    """A JSON response serialised like every other (`WalletSafeJSON`)."""
    return WalletSafeJSON(data, status_code=status)


def error_response(status: int, code: str, message: str) -> Response:
    """The one error shape; secrets (an RPC URL in a chain error) never reach the caller."""
    return json_response({"error": {"code": code, "message": redact(message)}}, status)


def _validation_message(errors: list[Any]) -> tuple[str, str]:
    if any(e.get("type") == "json_invalid" for e in errors):
        return "malformed_json", "request body is not valid JSON (RFC 8259: no NaN/Infinity)"
    parts = []
    for e in errors[:5]:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        parts.append(f"{loc or 'body'}: {e.get('msg')}")
    more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
    return "invalid_field", "; ".join(parts) + more


RETRY_AFTER_S = 2


def database_unavailable(exc: BaseException) -> bool:
    """The database is down, restarting, unreachable or out of connections: a 503 (retry), not
    a bug. (A constraint violation is an ``IntegrityError``, never this.)"""
    if isinstance(exc, (OperationalError, InterfaceError, PoolTimeout)):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def invalid_body_response(errors: list[Any]) -> Response:
    """The answer to a body that does not parse or validate (400 malformed JSON, else 422)."""
    code, message = _validation_message(errors)
    return error_response(400 if code == "malformed_json" else 422, code, message)


def exception_response(exc: Exception) -> Response:
    """The answer to an exception a handler raised: a chain error 503, a coloco error its
    code's status, the database unavailable 503 with Retry-After, anything else 500 (logged)."""
    if isinstance(exc, ChainError):
        return error_response(503, exc.code, exc.message)
    if isinstance(exc, ColocoError):
        return error_response(_STATUS.get(exc.code, 400), exc.code, exc.message)
    if database_unavailable(exc):
        log.warning("database unavailable: %s", type(exc).__name__)
        response = error_response(
            503,
            "database_unavailable",
            "the ledger's database is unreachable or busy: retry in a few seconds",
        )
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
        return response
    log.error("unhandled error", exc_info=exc)
    return error_response(500, "internal_error", "internal error; see the ledger's log")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> Response:
        return invalid_body_response(list(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        if exc.status_code != 405:
            return error_response(exc.status_code, code, str(exc.detail))
        allow = ", ".join(allowed_methods(request.app, request.scope))
        response = error_response(
            405, code, f"{request.method} is not served at {request.url.path}: use {allow}"
        )
        response.headers["Allow"] = allow
        return response

    async def _mapped(_: Request, exc: Exception) -> Response:
        return exception_response(exc)

    # answered here, not re-raised to the server's log like the catch-all below
    for kind in (ChainError, ColocoError, DBAPIError, PoolTimeout):
        app.add_exception_handler(kind, _mapped)
    app.add_exception_handler(Exception, _mapped)


class BodyLimit:
    """Pure ASGI middleware: refuse bodies over ``limit`` bytes (``blob_limit`` for /v1/blobs)."""

    def __init__(self, app: ASGIApp, *, limit: int, blob_limit: int) -> None:
        self.app = app
        self.limit = limit
        self.blob_limit = blob_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.blob_limit if scope["path"].startswith("/v1/blobs/") else self.limit
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_big = int(value) > limit
                except ValueError:
                    too_big = False
                if too_big:
                    await self._refuse(scope, receive, send, limit)
                    return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._refuse(scope, receive, send, limit)

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        await too_large_response(limit)(scope, receive, send)


def too_large_response(limit: int) -> Response:
    return error_response(
        413, "body_too_large", f"request body over {limit} bytes: send less (or batch less)"
    )


class _TooLarge(Exception):
    pass
