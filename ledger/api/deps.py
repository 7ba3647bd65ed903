"""Route dependencies: each route's signature says what it needs."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlmodel import Session

from ledger.chain.client import LedgerChain
from ledger.core.config import Settings
from ledger.service import Ledger
from protocol.errors import LedgerError


async def get_ledger(request: Request) -> Ledger:
    ledger: Ledger = request.app.state.ledger
    return ledger


LedgerDep = Annotated[Ledger, Depends(get_ledger)]


async def get_settings(ledger: LedgerDep) -> Settings:
    return ledger.settings


async def get_chain(ledger: LedgerDep) -> LedgerChain:
    return ledger.chain


async def get_db(request: Request) -> AsyncIterator[Session]:
    """A session for one request, closed on the event loop when the request ends.

    Async on purpose: a sync generator's exit needs a worker thread, and when every thread is
    busy waiting for a pooled connection held by sessions waiting for their exit, nothing moves.
    The same cycle without the exit: a sync route's response is validated in a worker thread
    after the route returned, while its session still holds its connection; with more such
    sessions than connections, the threads wait for the pool and the sessions for a thread
    (the freeze of bench.ledger's mixed phase). So sessions wait for a slot on the event loop,
    holding nothing, and there are never more than the pool keeps for them
    (:func:`ledger.core.db.make_engine`: one per API thread besides what the threads open).
    """
    ledger: Ledger = request.app.state.ledger
    async with request.app.state.db_slots:
        session = Session(ledger.engine, expire_on_commit=False)
        try:
            yield session
        finally:
            session.close()


SessionDep = Annotated[Session, Depends(get_db)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
ChainDep = Annotated[LedgerChain, Depends(get_chain)]


def require_admin(
    settings: SettingsDep, authorization: Annotated[str | None, Header()] = None
) -> None:
    expected = "Bearer " + settings.admin_token.get_secret_value()
    if authorization is None or not hmac.compare_digest(authorization, expected):
        raise LedgerError(
            "admin endpoint: send 'Authorization: Bearer <COLOCO_LEDGER_ADMIN_TOKEN>'",
            code="unauthorized",
        )


AdminDep = Annotated[None, Depends(require_admin)]
