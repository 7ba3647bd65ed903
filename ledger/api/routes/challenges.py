"""The compute market's timed hardware challenge: POST /v1/market/challenges (a node's signed
claim -> seed, one nonce per device, deadline), POST .../{id}/commit (each device's Merkle root
of C by the deadline -> its probe key), POST .../{id}/open (the probed rows of C -> the
verdict), GET .../{id} (the record: claim, outcome, measured throughput, memory and devices).
The rules are in ledger/intake/challenges.py, the math in reference/challenge.py."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ledger.api.deps import JSON_BODY, DomainDep, SessionDep, SnapshotDep
from ledger.api.errors import errors, json_response
from ledger.core.models import utcnow
from ledger.core.schemas import (
    JS_SAFE_MAX,
    AddressStr,
    Hex32,
    SignatureHex,
    _decimal,
    _uint_schema,
)
from ledger.intake import challenges
from protocol.errors import LedgerError
from reference import challenge as ch

router = APIRouter(prefix="/market/challenges", tags=["market"])

IdPath = Annotated[int, Path(ge=1, le=JS_SAFE_MAX)]
Device = Annotated[int, BeforeValidator(_decimal), Field(ge=0, lt=64), _uint_schema(6)]
Devices = Annotated[int, BeforeValidator(_decimal), Field(ge=1, lt=64), _uint_schema(6, least=1)]
Positive = Annotated[int, BeforeValidator(_decimal), Field(ge=1, lt=1 << 63), _uint_schema(63, 1)]
Expires = Annotated[int, BeforeValidator(_decimal), Field(ge=0, lt=1 << 40), _uint_schema(40)]


class ClaimIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    node: AddressStr
    kind: Literal["cpu", "cuda"]
    devices: Devices
    memoryBytes: Positive  # noqa: N815 - wire names
    flops: Positive
    request: Hex32
    expires: Expires
    signature: SignatureHex


class CommitIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    device: Device
    root: Hex32
    signature: SignatureHex


class OpeningIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    rows: dict[str, str]
    """Spot row index -> the row as hex fp32 little endian."""
    proofs: dict[str, list[str]]
    """Spot row index -> its Merkle proof, 0x hashes from the leaf up."""


class OpenIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    device: Device
    opening: OpeningIn
    signature: SignatureHex


@router.post(
    "",
    status_code=201,
    responses=errors(400, 403, 409, 413, 415, 422, 503),
    dependencies=JSON_BODY,
)
def post_challenge(
    body: ClaimIn, session: SessionDep, snapshot: SnapshotDep, domain: DomainDep
) -> Any:
    """Challenge a registered node on its signed claim; the clock starts now."""
    claim = challenges.Claim(
        kind=body.kind,
        devices=body.devices,
        memory_bytes=body.memoryBytes,
        flops=body.flops,
        request=bytes.fromhex(body.request[2:]),
        expires=body.expires,
    )
    row, devices = challenges.issue(
        session, snapshot, domain, body.node, claim, body.signature, utcnow()
    )
    return json_response(
        {
            "id": row.id,
            "node": row.node,
            "seed": row.seed,
            "nonces": [d.nonce for d in devices],
            "n": row.n,
            "m": row.m,
            "issued_at": row.issued_at.isoformat(),
            "deadline_at": row.deadline_at.isoformat(),
            "deadline_s": (row.deadline_at - row.issued_at).total_seconds(),
            "open_window_s": challenges.OPEN_WINDOW_S,
        },
        201,
    )


@router.post(
    "/{challenge_id}/commit",
    responses=errors(400, 404, 409, 413, 415, 422),
    dependencies=JSON_BODY,
)
def post_commit(
    challenge_id: IdPath, body: CommitIn, session: SessionDep, domain: DomainDep
) -> Any:
    """One device's Merkle root of C; the answer is its probe key (R and the spot rows)."""
    key = challenges.commit(
        session,
        domain,
        challenge_id,
        body.device,
        bytes.fromhex(body.root[2:]),
        body.signature,
        utcnow(),
    )
    return {"device": body.device, "probe": "0x" + key.hex()}


@router.post(
    "/{challenge_id}/open",
    responses=errors(400, 404, 409, 413, 415, 422),
    dependencies=JSON_BODY,
)
def post_open(challenge_id: IdPath, body: OpenIn, session: SessionDep, domain: DomainDep) -> Any:
    """One device's opening; the challenge's record (decided once every device is)."""
    challenges.status(session, challenge_id, utcnow())  # 404 for an unknown challenge first
    try:
        opening = ch.Opening.from_json(body.opening.model_dump())
    except ch.ChallengeError as exc:
        raise LedgerError(str(exc), code="invalid_field") from None
    row = challenges.open_(
        session, domain, challenge_id, body.device, opening, body.signature, utcnow()
    )
    return challenges.status(session, row.id or 0, utcnow())


@router.get("/{challenge_id}", responses=errors(404, 422))
def get_challenge(challenge_id: IdPath, session: SessionDep) -> Any:
    """The challenge, its devices and its verdict (the secret once it is decided)."""
    return challenges.status(session, challenge_id, utcnow())
