"""The compute market: POST /v1/market/offers (a node's signed ComputeOffer), GET
/v1/market/offers (the nodes' current offers, filtered, paged) and POST /v1/market/requests (a
run's needs -> the ranked choice and a reason for every offer not chosen).

Who may send what, the worst case and its bound: docs/ledger.md, "The compute market".
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import IntegrityError

from ledger.api.deps import JSON_BODY, DomainDep, SessionDep, SnapshotDep
from ledger.api.errors import errors, json_response
from ledger.core.schemas import AddressStr, SignatureHex, Uint256, WireStruct, wire_model
from ledger.intake.verify import reject
from ledger.market.offers import BOOKS, all_offers, matching, offer_json, post_offer
from ledger.market.ranking import Request, min_bandwidth, rank
from protocol.eip712 import wallet_int
from protocol.offer import OFFER_SPEC

router = APIRouter(prefix="/market", tags=["market"])

LIMIT, LIMIT_MAX = 100, 1000  # offers listed per page: the default and the most
_INT63 = 1 << 63
_STRICT = ConfigDict(extra="forbid", strict=True)

if TYPE_CHECKING:
    OfferFields = WireStruct
else:
    OfferFields = wire_model(
        "OfferFields",
        OFFER_SPEC,
        "The ComputeOffer in its camelCase wire form (docs/interfaces.md).",
    )


class OfferIn(BaseModel):
    """POST /v1/market/offers body."""

    model_config = _STRICT

    offer: OfferFields
    signature: SignatureHex


class RequestIn(BaseModel):
    """POST /v1/market/requests body: what a run needs. The bandwidth need is ``min_bandwidth``
    (bit/s) or derived from ``packet_bytes`` and ``round_seconds`` (and ``group``, the
    all-gather's members, by default ``devices``): ledger.market.ranking.min_bandwidth."""

    model_config = _STRICT

    devices: int = Field(ge=1, le=1_000_000)
    memory_bytes: int = Field(ge=0, lt=_INT63, description="per device")
    hours: int = Field(ge=1, le=100_000)
    budget: Uint256 = Field(description="wei, for all the devices and hours")
    min_bandwidth: int | None = Field(default=None, ge=0, lt=_INT63, description="bit/s")
    packet_bytes: int | None = Field(default=None, ge=0, lt=_INT63)
    round_seconds: int | None = Field(default=None, ge=1, lt=_INT63)
    group: int | None = Field(default=None, ge=1, le=1_000_000)
    verified_only: bool = False
    max_providers: int | None = Field(default=None, ge=1, le=1_000_000)

    def need(self) -> Request:
        if self.min_bandwidth is not None:
            bandwidth = self.min_bandwidth
        elif self.packet_bytes is not None and self.round_seconds is not None:
            group = self.group or self.devices
            bandwidth = min_bandwidth(self.packet_bytes, self.round_seconds, group)
        else:
            raise reject(
                "invalid_field",
                "state the run's bandwidth need: min_bandwidth (bit/s), or packet_bytes and "
                "round_seconds (the ledger derives it, docs/ledger.md)",
            )
        return Request(
            devices=self.devices,
            memory_bytes=self.memory_bytes,
            min_bandwidth=bandwidth,
            budget=int(self.budget),
            hours=self.hours,
            verified_only=self.verified_only,
            max_providers=self.max_providers,
        )


def _now() -> int:
    return int(time.time())


@router.post(
    "/offers",
    status_code=202,
    responses=errors(400, 403, 409, 413, 415, 422, 503),
    dependencies=JSON_BODY,
)
def post_market_offer(
    body: OfferIn, session: SessionDep, domain: DomainDep, snapshot: SnapshotDep
) -> Response:
    """Offer a registered, staked node's measured hardware at a price. A higher nonce replaces
    the node's offer; re-posting the current one answers it again."""
    conn = session.connection()
    try:
        posted = post_offer(
            conn, body.offer.model_dump(), body.signature, domain, snapshot, now=_now()
        )
        session.commit()
    except IntegrityError:
        session.rollback()
        raise reject(
            "stale_nonce",
            "another offer of this node was stored at the same moment: read "
            "GET /v1/market/offers?node=... and sign a higher nonce",
        ) from None
    return json_response(
        {
            "id": posted.id,
            "status": "accepted",
            "digest": posted.digest,
            "verified": posted.verified,
            "replaced": posted.replaced,
        },
        202,
    )


@router.get("/offers", responses=errors(422, 503))
def list_market_offers(
    session: SessionDep,
    snapshot: SnapshotDep,
    *,
    node: AddressStr | None = None,
    operator: AddressStr | None = None,
    device_kind: Annotated[str | None, Query(max_length=32)] = None,
    region: Annotated[str | None, Query(max_length=32)] = None,
    min_memory: Annotated[int, Query(ge=0, lt=_INT63)] = 0,
    min_devices: Annotated[int, Query(ge=0, lt=_INT63)] = 0,
    verified: bool | None = None,
    include_expired: bool = False,
    limit: Annotated[int, Query(ge=1, le=LIMIT_MAX)] = LIMIT,
    before: Annotated[int | None, Query(ge=1, description="offers with a smaller id")] = None,
) -> Response:
    """The nodes' current offers, newest first (live ones only unless ``include_expired``:
    an expired offer or one whose node is no longer staked). ``next_before``: the next page's
    ``before``, or null."""
    now = _now()
    found = matching(
        all_offers(session.connection(), snapshot),
        now,
        node=node,
        operator=operator,
        device_kind=device_kind,
        region=region,
        min_memory=min_memory,
        min_devices=min_devices,
        verified=verified,
        include_expired=include_expired,
    )
    found.sort(key=lambda o: -o.id)
    if before is not None:
        found = [o for o in found if o.id < before]
    page = found[:limit]
    return json_response(
        {
            "offers": [offer_json(o) for o in page],
            "next_before": page[-1].id if len(found) > limit else None,
            "now": now,
        }
    )


@router.post("/requests", responses=errors(400, 413, 415, 422, 503), dependencies=JSON_BODY)
def post_market_request(body: RequestIn, session: SessionDep, snapshot: SnapshotDep) -> Response:
    """Rank every node's current offer against a run's needs: the choice, in rank order, and
    for every offer not chosen its reason. Nothing is stored."""
    need = body.need()
    now = _now()
    selection = rank(BOOKS.book(session.connection(), snapshot), need, now)
    return json_response(
        {
            "request": {
                "devices": need.devices,
                "memory_bytes": need.memory_bytes,
                "min_bandwidth": need.min_bandwidth,
                "budget": wallet_int(need.budget),
                "hours": need.hours,
                "verified_only": need.verified_only,
                "max_providers": need.max_providers,
            },
            "now": now,
            **selection.as_json(),
        }
    )
