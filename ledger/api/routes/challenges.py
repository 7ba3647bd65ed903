"""The compute market's timed hardware challenge: POST /v1/market/challenges (a node's signed
claim -> seed, one nonce per device, deadline), POST .../{id}/commit (each device's Merkle root
of C by the deadline -> its probe key), POST .../{id}/open (the probed rows of C -> the
verdict), GET .../{id} (the record: claim, outcome, measured throughput, memory and devices).
The rules are in ledger/intake/challenges.py, the math in reference/challenge.py."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from ledger.api.deps import JSON_BODY, DomainDep, SessionDep, SnapshotDep
from ledger.api.errors import errors, json_response
from ledger.core.models import utcnow
from ledger.core.schemas import AddressStr, Hex32, SignatureHex
from ledger.intake import challenges
from protocol.errors import LedgerError
from reference import challenge as ch

router = APIRouter(prefix="/market/challenges", tags=["market"])

IdPath = Annotated[int, Path(ge=1, lt=1 << 62)]
Device = Annotated[int, Field(ge=0, lt=challenges.MAX_DEVICES)]


class ClaimIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    node: AddressStr
    kind: str
    devices: Annotated[int, Field(ge=1, le=challenges.MAX_DEVICES)]
    memoryBytes: Annotated[int, Field(ge=1, lt=1 << 62)]  # noqa: N815 - wire names
    flops: Annotated[int, Field(ge=1, lt=1 << 62)]
    request: Hex32
    expires: Annotated[int, Field(ge=0, lt=1 << 40)]
    signature: SignatureHex


class CommitIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    device: Device
    root: Hex32
    signature: SignatureHex


class OpenIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    device: Device
    opening: dict[str, Any]
    signature: SignatureHex


@router.post("", status_code=201, responses=errors(403, 409, 422, 503), dependencies=JSON_BODY)
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


@router.post("/{challenge_id}/commit", responses=errors(404, 409, 422), dependencies=JSON_BODY)
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


@router.post("/{challenge_id}/open", responses=errors(404, 409, 422), dependencies=JSON_BODY)
def post_open(challenge_id: IdPath, body: OpenIn, session: SessionDep, domain: DomainDep) -> Any:
    """One device's opening; the challenge's record (decided once every device is)."""
    try:
        opening = ch.Opening.from_json(body.opening)
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
