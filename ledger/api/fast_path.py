"""The hot path: JSON bodies of ``POST /v1/attestations`` and ``/v1/attestations/batch``
straight from ASGI to the same handlers as the routes (:mod:`ledger.api.routes.attestations`).

FastAPI's routing (a walk over every included router), dependency solving and request wrapping
cost several times the handler's own work on a small attestation (measured with a stand-in app:
about 140 us against 10 us per request, besides the signature recovery). This middleware sits
inside ``RequestId`` and ``BodyLimit`` (so ids and the body limit apply), parses the body with
the same pydantic model, answers invalid bodies like the app's validation handler, and maps
exceptions like the app's handlers (:func:`ledger.api.errors.exception_response`). Anything
else (other paths, methods, content types) goes on to FastAPI unchanged.

The same for the most polled read, ``GET /v1/runs/{run_id}/rounds[?limit=N]`` (what dashboards
and nodes poll; FastAPI's routing and dependency solving cost about as much as the read
itself): a well-formed request (a bytes32 run id, no query or only a ``limit`` in range) runs
the route's own function with a request session, in the API's thread pool, after waiting for a
session slot on the event loop exactly as :func:`ledger.api.deps.get_db` does; any other form
goes to FastAPI, which answers it (and its errors) as before.
"""

from __future__ import annotations

import re
from typing import Any

from anyio import to_thread
from pydantic import BaseModel, ValidationError
from sqlmodel import Session
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ledger.api.errors import exception_response, invalid_body_response
from ledger.api.routes.attestations import accept_batch, accept_one
from ledger.api.routes.runs import ROUNDS_LIMIT, ROUNDS_LIMIT_MAX, list_rounds
from ledger.schemas import AttestationIn, BatchIn

_ROUTES: dict[str, tuple[type[BaseModel], Any]] = {
    "/v1/attestations": (AttestationIn, accept_one),
    "/v1/attestations/batch": (BatchIn, accept_batch),
}


_ROUNDS_PATH = re.compile(r"/v1/runs/(0x[0-9a-fA-F]{64})/rounds")
_LIMIT = re.compile(rb"limit=([1-9][0-9]{0,2})")


def _rounds_request(scope: Scope) -> tuple[str, int] | None:
    """(run id, limit) of a well-formed ``GET /v1/runs/{run}/rounds`` (else None: FastAPI's)."""
    if scope["method"] != "GET":
        return None
    found = _ROUNDS_PATH.fullmatch(scope["path"])
    if found is None:
        return None
    query: bytes = scope.get("query_string", b"")
    if not query:
        return found.group(1), ROUNDS_LIMIT  # the route's default
    limit = _LIMIT.fullmatch(query)
    if limit is None or int(limit.group(1)) > ROUNDS_LIMIT_MAX:
        return None
    return found.group(1), int(limit.group(1))


def _read_rounds(ledger: Any, run_id: str, limit: int) -> Response:
    with Session(ledger.engine, expire_on_commit=False) as session:
        return list_rounds(run_id, session, limit)


def _json(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
            return kind == b"application/json"
    return False


class FastIntake:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rounds = _rounds_request(scope) if scope["type"] == "http" else None
        if rounds is not None:
            await self._rounds(scope, receive, send, *rounds)
            return
        route = _ROUTES.get(scope["path"]) if scope["type"] == "http" else None
        if route is None or scope["method"] != "POST" or not _json(scope["headers"]):
            await self.app(scope, receive, send)
            return
        model, handler = route
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        if not raw:  # what FastAPI answers to a missing body
            response = invalid_body_response([{"loc": ("body",), "msg": "Field required"}])
        else:
            try:
                body = model.model_validate_json(raw)
            except ValidationError as exc:
                response = invalid_body_response(list(exc.errors()))
            else:
                try:
                    response = await handler(scope["app"].state.ledger, body)
                except Exception as exc:
                    response = exception_response(exc)
        await response(scope, receive, send)

    @staticmethod
    async def _rounds(scope: Scope, receive: Receive, send: Send, run_id: str, limit: int) -> None:
        app = scope["app"]
        async with app.state.db_slots:  # as ledger.api.deps.get_db: a slot, holding nothing
            try:
                response = await to_thread.run_sync(_read_rounds, app.state.ledger, run_id, limit)
            except Exception as exc:
                response = exception_response(exc)
        await response(scope, receive, send)
