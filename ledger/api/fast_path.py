"""The hot path: JSON bodies of ``POST /v1/attestations`` and ``/v1/attestations/batch``
straight from ASGI to the same handlers as the routes (:mod:`ledger.api.routes.attestations`).

FastAPI's routing (a walk over every included router), dependency solving and request wrapping
cost several times the handler's own work on a small attestation (measured with a stand-in app:
about 140 us against 10 us per request, besides the signature recovery). This middleware sits
inside ``RequestId`` and ``BodyLimit`` (so ids and the body limit apply), parses the body with
the same pydantic model, answers invalid bodies like the app's validation handler, and maps
exceptions like the app's handlers (:func:`ledger.api.errors.exception_response`). Anything
else (other paths, methods, content types) goes on to FastAPI unchanged.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from ledger.api.errors import exception_response, invalid_body_response
from ledger.api.routes.attestations import accept_batch, accept_one
from ledger.schemas import AttestationIn, BatchIn

_ROUTES: dict[str, tuple[type[BaseModel], Any]] = {
    "/v1/attestations": (AttestationIn, accept_one),
    "/v1/attestations/batch": (BatchIn, accept_batch),
}


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
