"""Runs and rounds: GET rounds (state, members, scores, tx hash); POST /v1/runs (admin genesis),
GET /v1/runs/{run}, POST /v1/runs/{run}/close (admin: no round past the final one)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response
from sqlalchemy import Connection, Engine, bindparam
from sqlalchemy import select as sa_select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from ledger.api.deps import (
    JSON_BODY,
    AdminDep,
    ChainDep,
    ClosuresDep,
    EngineDep,
    RoundBookDep,
    SessionDep,
    SettlerDep,
    SnapshotDep,
    WorkerDep,
)
from ledger.api.errors import errors, json_response
from ledger.api.raw import RawSelect
from ledger.chain.indexer import ChainSnapshot
from ledger.core.models import Attestation, AttestationPublic, RoundPublic, RoundState, Run, utcnow
from ledger.core.round_book import RoundBook
from ledger.core.schemas import EXAMPLE_RUN, RunCloseIn, RunIn, RunInfo, RunOut
from ledger.intake.closing import RunClosures
from protocol.errors import LedgerError
from protocol.runs import run_id_of_name
from protocol.types import RoundNumber, RunId

router = APIRouter(tags=["runs"])

RunIdPath = Annotated[
    str,
    Path(pattern=r"^0x[0-9a-fA-F]{64}$", description="bytes32 run id", examples=[EXAMPLE_RUN]),
]


def _ref(path: str, method: str = "get") -> str:
    """An OpenAPI ``operationRef`` to the operation at ``path`` (a JSON pointer)."""
    return "#/paths/" + path.replace("~", "~0").replace("/", "~1") + "/" + method


def run_links(run: str = "$response.body#/run_id") -> dict[str, Any]:
    """OpenAPI links from an answer naming a run to what can be asked of it (stateful testing
    walks them: create a run, read it, its round 0 and outer state, close it)."""
    rounds = "/v1/runs/{run_id}/rounds/{round}"
    targets = {
        "GetRun": (_ref("/v1/runs/{run_id}"), {}),
        "ListRounds": (_ref("/v1/runs/{run_id}/rounds"), {}),
        "GetGenesisRound": (_ref(rounds), {"round": 0}),
        "GetGenesisMembers": (_ref(rounds + "/members"), {"round": 0}),
        "GetGenesisOuter": (_ref("/v1/runs/{run_id}/outer/{round}"), {"round": 0}),
        "CloseRun": (_ref("/v1/runs/{run_id}/close", "post"), {}),
    }
    return {
        name: {"operationRef": ref, "parameters": {"run_id": run, **extra}}
        for name, (ref, extra) in targets.items()
    }


_ROUND = RoundState.__table__  # type: ignore[attr-defined]
_ATT = Attestation.__table__  # type: ignore[attr-defined]
_DERIVED = ("members", "expected", "scores")  # built from other columns and rows
_ROUND_COLUMNS = (
    *(_ROUND.c[name] for name in RoundPublic.model_fields if name not in _DERIVED),
    _ROUND.c.expected,
)
_SCORE_COLUMNS = tuple(_ATT.c[name] for name in AttestationPublic.model_fields)
_SCORE_NAMES = tuple(AttestationPublic.model_fields)
ROUNDS_LIMIT, ROUNDS_LIMIT_MAX = 50, 500  # GET .../rounds: the default and the largest limit
_ROUND_OF = _SCORE_NAMES.index("round")
# built once (a statement built per request cost a third of a rounds read's CPU): the rounds'
# attestations, a run's latest rounds, one round
_SCORES = RawSelect(  # the rounds asked for are the run's newest: every round between is one
    sa_select(*_SCORE_COLUMNS)
    .where(
        _ATT.c.run_id == bindparam("run"), _ATT.c.round.between(bindparam("lo"), bindparam("hi"))
    )
    .order_by(_ATT.c.id)
)
_LATEST = RawSelect(
    sa_select(*_ROUND_COLUMNS)
    .where(_ROUND.c.run_id == bindparam("run"))
    .order_by(_ROUND.c.round.desc())
    .limit(bindparam("limit"))
)
_ONE = RawSelect(
    sa_select(*_ROUND_COLUMNS).where(
        _ROUND.c.run_id == bindparam("run"), _ROUND.c.round == bindparam("round")
    )
)
_ROUND_NAMES = tuple(column.name for column in _ROUND_COLUMNS)
_ROUND_NUMBER = _ROUND_NAMES.index("round")


def _rounds_json(conn: Connection, run: str, rounds: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """``RoundPublic`` objects as plain JSON data, from rows: the rounds' attestations in one
    query (not one per round), no ORM objects, no model validation (a run's rounds are what
    dashboards and nodes poll; building models cost most of the request's CPU)."""
    scores: dict[int, list[dict[str, Any]]] = {r[_ROUND_NUMBER]: [] for r in rounds}
    if rounds:
        found = _SCORES.rows(conn, {"run": run, "lo": min(scores), "hi": max(scores)})
        for row in found:  # datetimes as they are: the response writes them (orjson, in C)
            atts = scores.get(row[_ROUND_OF])
            if atts is not None:  # one round (get_round) or a run's newest
                atts.append(dict(zip(_SCORE_NAMES, row, strict=True)))
    out = []
    for rnd in rounds:
        data = dict(zip(_ROUND_NAMES, rnd, strict=True))
        expected = data.pop("expected")
        atts = scores[rnd[_ROUND_NUMBER]]
        data["members"] = sorted(a["node"] for a in atts)
        data["expected"] = json.loads(expected) if expected else []
        data["scores"] = atts
        out.append(data)
    return out


def rounds_json(conn: Connection, run_id: str, limit: int) -> list[dict[str, Any]]:
    """The run's latest ``limit`` rounds, newest first, as ``list[RoundPublic]`` writes them."""
    run = run_id.lower()
    return _rounds_json(conn, run, _LATEST.rows(conn, {"run": run, "limit": limit}))


@router.get("/runs/{run_id}/rounds", response_model=list[RoundPublic], responses=errors(422, 503))
def list_rounds(
    run_id: RunIdPath,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=ROUNDS_LIMIT_MAX)] = ROUNDS_LIMIT,
) -> Response:
    """The run's latest rounds, newest first."""
    return json_response(rounds_json(session.connection(), run_id, limit))


@router.get(
    "/runs/{run_id}/rounds/{round}", response_model=RoundPublic, responses=errors(404, 422, 503)
)
def get_round(
    run_id: RunIdPath,
    round: Annotated[int, Path(ge=0, lt=1 << 63)],
    session: SessionDep,
) -> Response:
    run = run_id.lower()
    conn = session.connection()
    rnd = _ONE.rows(conn, {"run": run, "round": round})
    if not rnd:
        raise LedgerError(f"round {round} of run {run} is unknown to this ledger", code="not_found")
    return json_response(_rounds_json(conn, run, rnd)[0])


@router.post(
    "/runs",
    response_model=RunOut,
    status_code=201,
    responses={
        201: {"description": "round 0 committed (or already on chain)", "links": run_links()},
        **errors(400, 401, 409, 413, 415, 422, 503),
    },
    dependencies=JSON_BODY,
)
def create_run(
    body: RunIn,
    *,
    chain: ChainDep,
    book: RoundBookDep,
    engine: EngineDep,
    settler: SettlerDep,
    worker: WorkerDep,
    _admin: AdminDep,
) -> RunOut:
    """Admin: start a run by committing its genesis checkpoint as round 0 (if not yet on chain)."""
    run = body.run_id.lower()
    genesis = body.genesis_checkpoint.lower()
    run_bytes = RunId(bytes.fromhex(run[2:]))
    if body.name is not None and run_id_of_name(body.name) != run_bytes:
        raise LedgerError(
            f"name {body.name!r} is not run {run}'s name: its sha256 is "
            f"0x{run_id_of_name(body.name).hex()}; send the name the id was made from, or none",
            code="conflicting_name",
        )
    last = chain.last_round(run_bytes)
    if last is not None:
        onchain = "0x" + chain.client.checkpoint_of(run_bytes, RoundNumber(0)).hex()
        if onchain != genesis:
            raise LedgerError(
                f"run {run} already has genesis checkpoint {onchain} on chain, not {genesis}",
                code="conflicting_genesis",
            )
    try:
        rnd = _genesis_rows(book, engine, run, genesis, body.name, onchain=last is not None)
    except IntegrityError:  # another worker stored them at the same moment: theirs stand
        rnd = _genesis_rows(book, engine, run, genesis, body.name, onchain=last is not None)
    settler.record_intent(rnd)
    settlement = worker.settle_now(run, 0)
    worker.refresh_chain_view()
    return RunOut(
        run_id=run,
        genesis_checkpoint=genesis,
        committed=settlement.status in ("mined", "final"),
        tx_hash=settlement.tx_hash,
    )


def _genesis_rows(
    book: RoundBook, engine: Engine, run: str, genesis: str, name: str | None, *, onchain: bool
) -> RoundState:
    """The run's row and its scored round 0 (stored once; what is there already stands, but a
    name, checked against the id, is kept), under the round book's lock (as every change of a
    round's state)."""
    with book.locked(), Session(engine, expire_on_commit=False) as session:
        row = session.get(Run, run)
        if row is None:
            session.add(Run(run_id=run, genesis_checkpoint=genesis, name=name))
        elif name is not None and row.name is None:
            row.name = name
            session.add(row)
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


def _info(session: Session, run: str, closures: RunClosures, snapshot: ChainSnapshot) -> RunInfo:
    known = session.get(Run, run)
    final = closures.final.get(run)
    return RunInfo(
        run_id=run,
        genesis_checkpoint=known.genesis_checkpoint if known is not None else None,
        last_committed=snapshot.last_round.get(run),
        closed=final is not None,
        final_round=final,
    )


@router.get(
    "/runs/{run_id}",
    response_model=RunInfo,
    responses={200: {"description": "the run", "links": run_links()}, **errors(404, 422, 503)},
)
def get_run(
    run_id: RunIdPath, session: SessionDep, closures: ClosuresDep, snapshot: SnapshotDep
) -> RunInfo:
    """A run as this ledger knows it: genesis, last committed round, closed or not."""
    run = run_id.lower()
    info = _info(session, run, closures, snapshot)
    if info.genesis_checkpoint is None and info.last_committed is None:
        raise LedgerError(f"run {run} is unknown to this ledger", code="not_found")
    return info


@router.post(
    "/runs/{run_id}/close",
    response_model=RunInfo,
    responses={
        200: {"description": "closed: its final round", "links": run_links()},
        **errors(400, 401, 404, 413, 415, 422, 503),
    },
    dependencies=JSON_BODY,
)
def close_run(
    run_id: RunIdPath,
    *,
    session: SessionDep,
    book: RoundBookDep,
    closures: ClosuresDep,
    snapshot: SnapshotDep,
    _admin: AdminDep,
    body: RunCloseIn | None = None,
) -> RunInfo:
    """Admin: close a run; rounds in flight finish, later ones are refused (`run_closed`)."""
    run = run_id.lower()
    last = snapshot.last_round.get(run)
    if last is None:
        raise LedgerError(
            f"run {run} has no genesis commit on chain: nothing to close", code="unknown_run"
        )
    with book.locked():  # no attestation is checked against the run while it closes
        closures.close(run, last, body.final_round if body is not None else None)
    return _info(session, run, closures, snapshot)
