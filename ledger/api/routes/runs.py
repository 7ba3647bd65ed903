"""Runs and rounds: GET rounds (state, members, scores, tx hash); POST /v1/runs (admin genesis),
GET /v1/runs/{run}, POST /v1/runs/{run}/close (admin: no round past the final one)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response
from sqlalchemy import bindparam
from sqlalchemy import select as sa_select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from ledger.api.deps import AdminDep, LedgerDep, SessionDep
from ledger.api.errors import json_response
from ledger.models import Attestation, AttestationPublic, RoundPublic, RoundState, Run, utcnow
from ledger.schemas import RunCloseIn, RunIn, RunInfo, RunOut
from ledger.service import Ledger
from protocol.errors import LedgerError
from protocol.types import RoundNumber, RunId

router = APIRouter(tags=["runs"])

RunIdPath = Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{64}$", description="bytes32 run id")]


_ROUND = RoundState.__table__  # type: ignore[attr-defined]
_ATT = Attestation.__table__  # type: ignore[attr-defined]
_DERIVED = ("members", "expected", "scores")  # built from other columns and rows
_ROUND_COLUMNS = (
    *(_ROUND.c[name] for name in RoundPublic.model_fields if name not in _DERIVED),
    _ROUND.c.expected,
)
_SCORE_COLUMNS = tuple(_ATT.c[name] for name in AttestationPublic.model_fields)
_SCORE_NAMES = tuple(AttestationPublic.model_fields)
_RECEIVED_AT = _SCORE_NAMES.index("received_at")
ROUNDS_LIMIT, ROUNDS_LIMIT_MAX = 50, 500  # GET .../rounds: the default and the largest limit
_ROUND_OF = _SCORE_NAMES.index("round")
# built once (a statement built per request cost a third of a rounds read's CPU): the rounds'
# attestations, a run's latest rounds, one round
_SCORES = (
    sa_select(*_SCORE_COLUMNS)
    .where(_ATT.c.run_id == bindparam("run"), _ATT.c.round.in_(bindparam("rounds", expanding=True)))
    .order_by(_ATT.c.id)
)
_LATEST = (
    sa_select(*_ROUND_COLUMNS)
    .where(_ROUND.c.run_id == bindparam("run"))
    .order_by(_ROUND.c.round.desc())
    .limit(bindparam("limit"))
)
_ONE = sa_select(*_ROUND_COLUMNS).where(
    _ROUND.c.run_id == bindparam("run"), _ROUND.c.round == bindparam("round")
)


def _iso(moment: datetime | None) -> str | None:
    """A stored (UTC) moment as pydantic writes it: ISO 8601 with ``Z``."""
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def _rounds_json(session: Session, run: str, rounds: list[Any]) -> list[dict[str, Any]]:
    """``RoundPublic`` objects as plain JSON data, from Core rows: the rounds' attestations in
    one query (not one per round), no ORM objects, no model validation (a run's rounds are
    what dashboards and nodes poll; building models cost most of the request's CPU)."""
    scores: dict[int, list[dict[str, Any]]] = {int(r.round): [] for r in rounds}
    if rounds:
        found = session.execute(_SCORES, {"run": run, "rounds": list(scores)}).all()
        for row in found:
            values = list(row)
            values[_RECEIVED_AT] = _iso(values[_RECEIVED_AT])
            scores[int(values[_ROUND_OF])].append(dict(zip(_SCORE_NAMES, values, strict=True)))
    out = []
    for rnd in rounds:
        data = rnd._asdict()
        expected = data.pop("expected")
        for name in ("opened_at", "deadline_at", "closed_at"):
            data[name] = _iso(data[name])
        atts = scores[int(rnd.round)]
        data["members"] = sorted(a["node"] for a in atts)
        data["expected"] = json.loads(expected) if expected else []
        data["scores"] = atts
        out.append(data)
    return out


@router.get("/runs/{run_id}/rounds", response_model=list[RoundPublic])
def list_rounds(
    run_id: RunIdPath,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=ROUNDS_LIMIT_MAX)] = ROUNDS_LIMIT,
) -> Response:
    """The run's latest rounds, newest first."""
    run = run_id.lower()
    rounds = session.execute(_LATEST, {"run": run, "limit": limit}).all()
    return json_response(_rounds_json(session, run, list(rounds)))


@router.get("/runs/{run_id}/rounds/{round}", response_model=RoundPublic)
def get_round(
    run_id: RunIdPath,
    round: Annotated[int, Path(ge=0, lt=1 << 63)],
    session: SessionDep,
) -> Response:
    run = run_id.lower()
    rnd = session.execute(_ONE, {"run": run, "round": round}).first()
    if rnd is None:
        raise LedgerError(f"round {round} of run {run} is unknown to this ledger", code="not_found")
    return json_response(_rounds_json(session, run, [rnd])[0])


@router.post("/runs", response_model=RunOut, status_code=201)
def create_run(body: RunIn, ledger: LedgerDep, _admin: AdminDep) -> RunOut:
    """Admin: start a run by committing its genesis checkpoint as round 0 (if not yet on chain)."""
    run = body.run_id.lower()
    genesis = body.genesis_checkpoint.lower()
    if int(genesis, 16) == 0:
        raise LedgerError("genesis_checkpoint must not be zero", code="invalid_field")
    run_bytes = RunId(bytes.fromhex(run[2:]))
    last = ledger.chain.last_round(run_bytes)
    if last is not None:
        onchain = "0x" + ledger.chain.client.checkpoint_of(run_bytes, RoundNumber(0)).hex()
        if onchain != genesis:
            raise LedgerError(
                f"run {run} already has genesis checkpoint {onchain} on chain, not {genesis}",
                code="conflicting_genesis",
            )
    try:
        rnd = _genesis_rows(ledger, run, genesis, onchain=last is not None)
    except IntegrityError:  # another worker stored them at the same moment: theirs stand
        rnd = _genesis_rows(ledger, run, genesis, onchain=last is not None)
    ledger.settler.record_intent(rnd)
    settlement = ledger.settle_now(run, 0)
    ledger.refresh_chain_view()
    return RunOut(
        run_id=run,
        genesis_checkpoint=genesis,
        committed=settlement.status in ("mined", "final"),
        tx_hash=settlement.tx_hash,
    )


def _genesis_rows(ledger: Ledger, run: str, genesis: str, *, onchain: bool) -> RoundState:
    """The run's row and its scored round 0 (stored once; what is there already stands)."""
    with ledger.intake.lock, Session(ledger.engine, expire_on_commit=False) as session:
        if session.get(Run, run) is None:
            session.add(Run(run_id=run, genesis_checkpoint=genesis))
        rnd = session.exec(
            select(RoundState).where(RoundState.run_id == run, RoundState.round == 0)
        ).first()
        if rnd is None:
            now = utcnow()
            rnd = RoundState(
                run_id=run,
                round=0,
                state="scored",
                opened_at=now,
                deadline_at=now,
                closed_at=now,
                checkpoint=genesis,
                total_work="0",
                attestations_root="0x" + bytes(32).hex(),
                note="genesis already on chain" if onchain else "genesis",
            )
            session.add(rnd)
        session.commit()
    return rnd


def _info(ledger: Ledger, session: Session, run: str) -> RunInfo:
    known = session.get(Run, run)
    final = ledger.closures.final.get(run)
    return RunInfo(
        run_id=run,
        genesis_checkpoint=known.genesis_checkpoint if known is not None else None,
        last_committed=ledger.indexer.snapshot.last_round.get(run),
        closed=final is not None,
        final_round=final,
    )


@router.get("/runs/{run_id}", response_model=RunInfo)
def get_run(run_id: RunIdPath, ledger: LedgerDep, session: SessionDep) -> RunInfo:
    """A run as this ledger knows it: genesis, last committed round, closed or not."""
    run = run_id.lower()
    info = _info(ledger, session, run)
    if info.genesis_checkpoint is None and info.last_committed is None:
        raise LedgerError(f"run {run} is unknown to this ledger", code="not_found")
    return info


@router.post("/runs/{run_id}/close", response_model=RunInfo)
def close_run(
    run_id: RunIdPath, ledger: LedgerDep, session: SessionDep, _admin: AdminDep,
    body: RunCloseIn | None = None,
) -> RunInfo:  # fmt: skip
    """Admin: close a run; rounds in flight finish, later ones are refused (`run_closed`)."""
    run = run_id.lower()
    last = ledger.indexer.snapshot.last_round.get(run)
    if last is None:
        raise LedgerError(
            f"run {run} has no genesis commit on chain: nothing to close", code="unknown_run"
        )
    with ledger.intake.lock:
        ledger.closures.close(run, last, body.final_round if body is not None else None)
    return _info(ledger, session, run)
