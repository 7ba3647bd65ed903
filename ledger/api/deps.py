"""Route dependencies: each route's signature says what it needs, and gets only that.

The service (:class:`ledger.service.Ledger`) is known here and in :mod:`ledger.api.fast_path`
(which answers a few routes without FastAPI, handing them the same parts) and nowhere else in
the API or the dashboard: a route asks for the intake, the chain snapshot, the blob store...
each through one provider below. Every provider reads ``request.app.state``, so none adds a
parameter to the OpenAPI schema; they are ``async`` so that FastAPI resolves them on the event
loop (a sync dependency costs a worker thread each). A provider returns the part as it is at
that moment: the chain snapshot is the indexer's current one, so a route that waits for a
database session lists :data:`SessionDep` first (dependencies resolve in signature order).
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from typing import Annotated, Protocol

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine
from sqlmodel import Session

from ledger.chain.client import LedgerChain
from ledger.chain.indexer import ChainSnapshot
from ledger.chain.settlement import Settler
from ledger.core.blobstore import BlobStore
from ledger.core.config import Settings
from ledger.core.models import Settlement
from ledger.core.round_book import RoundBook
from ledger.intake.accept import Intake
from ledger.intake.closing import RunClosures
from ledger.intake.membership import Membership
from ledger.reads.metrics import Metrics, WorkerStatus
from ledger.reads.trees import EthTrees, RewardsTrees
from ledger.service import Ledger
from protocol.eip712 import Eip712Domain
from protocol.errors import LedgerError


class Worker(WorkerStatus, Protocol):
    """What an admin route may ask of the background worker: its status, to commit a recorded
    settlement now (or wait for the leader to), to catch up with the chain."""

    def settle_now(self, run_id: str, round_: int, *, timeout_s: float = ...) -> Settlement: ...

    def refresh_chain_view(self) -> None: ...


def _service(request: Request) -> Ledger:
    ledger: Ledger = request.app.state.ledger  # set by the app's lifespan (ledger.main)
    return ledger


async def get_settings(request: Request) -> Settings:
    return _service(request).settings


async def get_chain(request: Request) -> LedgerChain:
    return _service(request).chain


async def get_domain(request: Request) -> Eip712Domain:
    """The EIP-712 domain attestations, joins and uploads are signed in."""
    return _service(request).chain.domain


async def get_snapshot(request: Request) -> ChainSnapshot:
    """The indexer's view of the chain (nodes, stakes, commits, roots), as of now."""
    return _service(request).indexer.snapshot


async def get_engine(request: Request) -> Engine:
    """The database engine, for what opens sessions of its own (not a request's session)."""
    return _service(request).engine


async def get_intake(request: Request) -> Intake:
    return _service(request).intake


async def get_metrics(request: Request) -> Metrics:
    return _service(request).metrics


async def get_blobs(request: Request) -> BlobStore:
    return _service(request).blobs


async def get_membership(request: Request) -> Membership:
    return _service(request).membership


async def get_closures(request: Request) -> RunClosures:
    return _service(request).closures


async def get_round_book(request: Request) -> RoundBook:
    return _service(request).round_book


async def get_settler(request: Request) -> Settler:
    return _service(request).settler


async def get_worker(request: Request) -> Worker:
    return _service(request)


async def get_rewards_trees(request: Request) -> RewardsTrees:
    return _service(request).rewards_trees


async def get_eth_trees(request: Request) -> EthTrees:
    return _service(request).eth_trees


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
    engine = _service(request).engine
    async with request.app.state.db_slots:
        session = Session(engine, expire_on_commit=False)
        try:
            yield session
        finally:
            session.close()


SessionDep = Annotated[Session, Depends(get_db)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
ChainDep = Annotated[LedgerChain, Depends(get_chain)]
DomainDep = Annotated[Eip712Domain, Depends(get_domain)]
SnapshotDep = Annotated[ChainSnapshot, Depends(get_snapshot)]
EngineDep = Annotated[Engine, Depends(get_engine)]
IntakeDep = Annotated[Intake, Depends(get_intake)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
BlobsDep = Annotated[BlobStore, Depends(get_blobs)]
MembershipDep = Annotated[Membership, Depends(get_membership)]
ClosuresDep = Annotated[RunClosures, Depends(get_closures)]
RoundBookDep = Annotated[RoundBook, Depends(get_round_book)]
SettlerDep = Annotated[Settler, Depends(get_settler)]
StatusDep = Annotated[WorkerStatus, Depends(get_worker)]
WorkerDep = Annotated[Worker, Depends(get_worker)]
RewardsTreesDep = Annotated[RewardsTrees, Depends(get_rewards_trees)]
EthTreesDep = Annotated[EthTrees, Depends(get_eth_trees)]


_ADMIN = HTTPBearer(
    auto_error=False,  # a missing token is refused below, in the one error shape
    scheme_name="admin",
    description="COLOCO_LEDGER_ADMIN_TOKEN, as `Authorization: Bearer <token>`",
)


def require_admin(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_ADMIN)],
) -> None:
    """The admin routes' guard (declared in the schema as the ``admin`` bearer scheme)."""
    expected = settings.admin_token.get_secret_value().encode()
    given = credentials.credentials.encode() if credentials is not None else b""
    if credentials is None or not hmac.compare_digest(given, expected):
        raise LedgerError(
            "admin endpoint: send 'Authorization: Bearer <COLOCO_LEDGER_ADMIN_TOKEN>'",
            code="unauthorized",
        )


AdminDep = Annotated[None, Depends(require_admin)]


def require_json(request: Request) -> None:
    """A JSON body route's guard: a body sent as another media type is refused with 415 (no
    Content-Type: read as JSON, as FastAPI does). Listed in the route's ``dependencies``."""
    kind = request.headers.get("content-type")
    if kind is None:
        return
    media = kind.split(";", 1)[0].strip().lower()
    if media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    ):
        return
    raise LedgerError(
        f"Content-Type {media or kind!r} is not served here: send the body as application/json",
        code="unsupported_media_type",
    )


JSON_BODY = [Depends(require_json)]
"""``dependencies`` of a route whose body is JSON."""
