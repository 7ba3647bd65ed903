"""A request id on every log line: taken from ``X-Request-ID`` (when sane) or made up.

A pure ASGI middleware sets a context variable for the request (and echoes the id in the
response's ``X-Request-ID``); a log record factory copies it into every record as
``request_id``. Work outside a request names itself (``tick-<n>`` for the background worker,
``write-<n>`` for a group commit).
"""

from __future__ import annotations

import logging
import re
import uuid
from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

request_id: ContextVar[str] = ContextVar("request_id", default="-")
_SANE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_installed = False


def install_log_field() -> None:
    """Every log record gets ``record.request_id`` (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record.request_id = request_id.get()
        return record

    logging.setLogRecordFactory(factory)


def id_of(scope: Scope) -> str:
    """The request's id: its ``X-Request-ID`` when sane, else a new one."""
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            given = value.decode("latin-1")
            return given if _SANE.match(given) else uuid.uuid4().hex
    return uuid.uuid4().hex


class RequestId:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = id_of(scope)
        token = request_id.set(rid)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id.reset(token)
