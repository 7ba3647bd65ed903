"""The hot path: JSON bodies of ``POST /v1/attestations`` and ``/v1/attestations/batch``
straight from ASGI to the same handlers as the routes (:mod:`ledger.api.routes.attestations`).

FastAPI's routing (a walk over every included router), dependency solving and request wrapping
cost several times the handler's own work on a small attestation (measured with a stand-in app:
about 140 us against 10 us per request, besides the signature recovery). :class:`FastPath`
answers them ahead of every middleware (and applies the request id and the body limit as those
do), parses the body with the same pydantic model, answers invalid bodies like the app's
validation handler, and maps exceptions like the app's handlers
(:func:`ledger.api.errors.exception_response`). Anything else (other paths, methods, content
types) goes on to FastAPI unchanged.

The same for the polled reads, ``GET /v1/runs/{run_id}/rounds``, ``/v1/nodes/{address}`` and
``/v1/rewards/{address}`` (``[?limit=N]``: what dashboards and nodes poll; FastAPI's routing and
dependency solving cost about as much as the read itself): a well-formed request (a bytes32 run
id or an address, no query or only a ``limit`` in range) runs the route's own function with a
request session, in the API's thread pool, after waiting for a session slot on the event loop
exactly as :func:`ledger.api.deps.get_db` does; any other form goes to FastAPI, which answers
it (and its errors) as before.

Without FastAPI's dependency solving, the handlers get their parts here, from the service, the
same ones the routes get through :mod:`ledger.api.deps` (the two places that know the service):
the intake and the metrics; the chain snapshot (read in the request's thread, as the route's
own dependency reads it just before the route) and the rewards and ETH trees.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from anyio import to_thread
from pydantic import BaseModel, ValidationError
from sqlalchemy import Connection
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ledger.api.errors import (
    exception_response,
    invalid_body_response,
    json_response,
    too_large_response,
)
from ledger.api.routes import attestations, nodes, rewards, runs
from ledger.api.routes.runs import ROUNDS_LIMIT, ROUNDS_LIMIT_MAX
from ledger.core.request_id import id_of, request_id
from ledger.core.schemas import AttestationIn, BatchIn
from ledger.service import Ledger


async def _accept_one(ledger: Ledger, body: AttestationIn) -> Response:
    return await attestations.accept_one(ledger.intake, ledger.metrics, body)


async def _accept_batch(ledger: Ledger, body: BatchIn) -> Response:
    limit = ledger.settings.max_batch_items
    return await attestations.accept_batch(ledger.intake, ledger.metrics, body, limit=limit)


_ROUTES: dict[str, tuple[type[BaseModel], Any]] = {
    "/v1/attestations": (AttestationIn, _accept_one),
    "/v1/attestations/batch": (BatchIn, _accept_batch),
}


_LIMIT = re.compile(rb"limit=([1-9][0-9]{0,3})")


def _read_rounds(ledger: Ledger, conn: Connection, run_id: str, limit: int) -> Any:
    return runs.rounds_json(conn, run_id, limit)


def _read_node(ledger: Ledger, conn: Connection, address: str, limit: int) -> Any:
    return nodes.node_json(ledger.indexer.snapshot, conn, address, limit)


def _read_rewards(ledger: Ledger, conn: Connection, address: str, limit: int) -> Any:
    return rewards.rewards_json(
        conn,
        address,
        limit,
        snap=ledger.indexer.snapshot,
        settled=ledger.rewards_trees,
        eth=ledger.eth_trees,
    )


Read = Callable[[Ledger, Connection, str, int], Any]  # (ledger, connection, key, limit) -> data
_RUN, _ADDRESS = r"(0x[0-9a-fA-F]{64})", r"(0x[0-9a-fA-F]{40})"
# the polled reads: path (its one parameter), the route's default and largest limit, the handler
_READS: tuple[tuple[re.Pattern[str], int, int, Read], ...] = (
    (re.compile(f"/v1/runs/{_RUN}/rounds"), ROUNDS_LIMIT, ROUNDS_LIMIT_MAX, _read_rounds),
    (re.compile(f"/v1/nodes/{_ADDRESS}"), nodes.LIMIT, nodes.LIMIT_MAX, _read_node),
    (re.compile(f"/v1/rewards/{_ADDRESS}"), rewards.LIMIT, rewards.LIMIT_MAX, _read_rewards),
)


def _read_request(scope: Scope) -> tuple[Read, str, int] | None:
    """(handler, path parameter, limit) of a well-formed polled read (else None: FastAPI's)."""
    if scope["method"] != "GET":
        return None
    for pattern, default, most, handler in _READS:
        found = pattern.fullmatch(scope["path"])
        if found is None:
            continue
        query: bytes = scope.get("query_string", b"")
        if not query:
            return handler, found.group(1), default
        limit = _LIMIT.fullmatch(query)
        if limit is None or int(limit.group(1)) > most:
            return None
        return handler, found.group(1), int(limit.group(1))
    return None


def _read(ledger: Ledger, handler: Read, key: str, limit: int) -> Response:
    with ledger.read_engine.connect() as conn:  # autocommit: the statements alone
        data = handler(ledger, conn, key, limit)
    return json_response(data)


def _json(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
            return kind == b"application/json"
    return False


Handler = Callable[[Receive], Awaitable[Response | None]]


class FastPath:
    """Answers the hot and polled requests ahead of FastAPI's middleware and routing
    (:class:`ledger.main.LedgerApp` asks :meth:`handler` first): the request id and the body
    limit applied here as their middleware (:class:`~ledger.core.request_id.RequestId`,
    :class:`~ledger.api.errors.BodyLimit`) applies them to the rest. Passing through the stack
    cost about 120 us of a single attestation's 700 us on the event loop (the framework's
    layers, and each layer's wrapper around ``send``)."""

    def __init__(self, app: Any, *, limit: int) -> None:
        self.app = app
        self.limit = limit

    def handler(self, scope: Scope) -> Handler | None:
        """How this request is answered here, or None (FastAPI answers it)."""
        if scope["type"] != "http":
            return None
        read = _read_request(scope)
        if read is not None:
            return partial(self._read, read)
        route = _ROUTES.get(scope["path"])
        if route is None or scope["method"] != "POST" or not _json(scope["headers"]):
            return None
        return partial(self._intake, route)

    async def answer(self, handler: Handler, scope: Scope, receive: Receive, send: Send) -> None:
        rid = id_of(scope)
        token = request_id.set(rid)
        try:
            response = await handler(receive)
            if response is not None:  # None: the client went away
                response.raw_headers.append((b"x-request-id", rid.encode()))
                await response(scope, receive, send)
        finally:
            request_id.reset(token)

    async def _intake(
        self, route: tuple[type[BaseModel], Any], receive: Receive
    ) -> Response | None:
        model, handler = route
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                return too_large_response(self.limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        if not raw:  # what FastAPI answers to a missing body
            return invalid_body_response([{"loc": ("body",), "msg": "Field required"}])
        try:
            body = model.model_validate_json(raw)
        except ValidationError as exc:
            return invalid_body_response(list(exc.errors()))
        try:
            return await handler(self.app.state.ledger, body)  # type: ignore[no-any-return]
        except Exception as exc:
            return exception_response(exc)

    async def _read(self, read: tuple[Read, str, int], _receive: Receive) -> Response:
        state = self.app.state
        async with state.db_slots:  # as ledger.api.deps.get_db: a slot, holding nothing
            try:
                return await to_thread.run_sync(_read, state.ledger, *read)
            except Exception as exc:
                return exception_response(exc)
