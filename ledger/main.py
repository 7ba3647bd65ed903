"""The ledger's FastAPI application: ``create_app(settings)``."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from anyio import to_thread
from fastapi import APIRouter, FastAPI
from starlette.types import Receive, Scope, Send

from ledger.api.errors import BodyLimit, WalletSafeJSON, install_error_handlers
from ledger.api.fast_path import FastPath
from ledger.api.routes import (
    attestations,
    audits,
    blobs,
    boundaries,
    challenges,
    funding,
    leases,
    market,
    membership,
    meta,
    metrics,
    nodes,
    rewards,
    runs,
)
from ledger.core.config import Settings
from ledger.core.request_id import RequestId, install_log_field
from ledger.dashboard import install as install_dashboard
from ledger.service import Ledger

log = logging.getLogger(__name__)


class LedgerApp(FastAPI):
    """FastAPI, with the attestation posts and the polled reads answered before its middleware
    and routing (:class:`ledger.api.fast_path.FastPath`); every other request as FastAPI's."""

    fast_path: FastPath | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        fast = self.fast_path
        handler = fast.handler(scope) if fast is not None else None
        if fast is None or handler is None:
            await super().__call__(scope, receive, send)
        else:
            await fast.answer(handler, scope, receive, send)


def create_app(settings: Settings | None = None, *, ledger: Ledger | None = None) -> FastAPI:
    """Build the app; the lifespan migrates the database, catches up and starts the worker."""
    settings = settings or (ledger.settings if ledger is not None else Settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # the API's thread count is the one the pool was sized for (ledger.core.db.make_engine)
        to_thread.current_default_thread_limiter().total_tokens = settings.api_threads
        app.state.db_slots = asyncio.Semaphore(settings.api_threads)  # ledger.api.deps.get_db
        service = ledger or Ledger(settings)
        service.prepare_database()
        service.start()
        app.state.ledger = service
        gc.collect()
        gc.freeze()  # start-up objects leave the collector's work: shorter pauses under load
        log.info(
            "ledger serving chain %d, database %s",
            service.chain.chain_id,
            settings.database_url.split("@")[-1],
        )
        try:
            yield
        finally:
            service.stop()

    app = LedgerApp(
        title="coloco ledger",
        version="1",
        summary="Verifies compute attestations, scores rounds and settles them on chain.",
        lifespan=lifespan,
        default_response_class=WalletSafeJSON,  # integers beyond 2^53 as decimal strings
    )
    api = APIRouter(prefix="/v1")
    for module in (meta, attestations, runs, audits, nodes, rewards, blobs, boundaries,
                   membership, funding, leases, challenges, market):  # fmt: skip
        api.include_router(module.router)
    app.include_router(api)
    app.include_router(metrics.router)
    install_error_handlers(app)
    install_dashboard(app)  # the dashboard at `/` (ledger/dashboard/)
    app.fast_path = FastPath(app, limit=settings.max_body_bytes)  # ahead of the stack below
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes, blob_limit=settings.max_blob_bytes)
    app.add_middleware(RequestId)  # outermost: every log line of the request carries its id
    install_log_field()
    return app
