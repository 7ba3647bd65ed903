"""Accepting attestations: level 0 checks, then one row per (run, round, node), idempotently.

The hot path: checks run outside the lock (CPU only: parse, hash, recover, snapshot lookups);
then one short transaction per group of requests: on PostgreSQL one statement opens the rounds
new to this process, share-locks the others and inserts every new row of an open round, ON
CONFLICT DO NOTHING RETURNING (slots already taken are looked up only when some were skipped);
on SQLite one SELECT for the slots already taken, then one multi-row INSERT .. RETURNING; one
INSERT for the rejections. The round book's lock (:mod:`ledger.core.round_book`) serialises
"is the round still open? insert" against the lifecycle closing rounds, so no attestation slips
into a round after it was scored. A refusal
is stored (the audit trail of ``GET /v1/nodes/{address}``) only once the sender's signature
verified, so nobody can fill another node's list; unknown senders are refused before any
signature work; retention is bounded (:mod:`ledger.rounds.retention`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    String,
    any_,
    bindparam,
    insert,
    select,
)
from sqlalchemy.dialects import registry
from sqlalchemy.dialects.postgresql import ARRAY

from ledger.chain.indexer import ChainSnapshot, Indexer
from ledger.core.config import Settings
from ledger.core.models import Attestation, Rejection, RoundState, stored_fields, utcnow
from ledger.core.round_book import RoundBook
from ledger.core.schemas import AttestationIn
from ledger.intake.closing import RunClosures
from ledger.intake.group_writer import GroupWriter
from ledger.intake.jobs import Job, Outcome, Slot
from ledger.intake.membership import Membership
from ledger.intake.verify import (
    Checked,
    Form,
    check_chain,
    check_form,
    check_sender,
    check_signer,
    http_status,
    recover_signers,
    reject,
)
from protocol.attestation import ATTESTATION_ATTRS
from protocol.errors import AttestationRejected

log = logging.getLogger(__name__)

_ATT = Attestation.__table__  # type: ignore[attr-defined]
_REJ = Rejection.__table__  # type: ignore[attr-defined]
_ROUND = RoundState.__table__  # type: ignore[attr-defined]
_INT63 = 1 << 63
# the columns an accepted attestation fills: its signed fields (ATTESTATION_SPEC's order), then
# what the intake adds; each declared in json_to_recordset as the table's PostgreSQL type
_GROUP_COLUMNS = (
    *ATTESTATION_ATTRS, "digest", "signature", "members", "commits", "received_at"
)  # fmt: skip


def _pg_types(columns: tuple[str, ...]) -> dict[str, str]:
    """Each column's PostgreSQL type without its length (``varchar``, ``bigint``, ...)."""
    pg = registry.load("postgresql")()
    kinds = {c: str(_ATT.c[c].type.compile(dialect=pg)).lower() for c in columns}
    short = {"timestamp with time zone": "timestamptz"}
    return {c: short.get(k, k.split("(")[0]) for c, k in kinds.items()}


_GROUP_TYPES = _pg_types(_GROUP_COLUMNS)
# a PostgreSQL group in one statement (sent as driver SQL: no SQLAlchemy compile or cache key;
# psycopg prepares it server-side after a few runs): open the group's rounds this process has
# not seen (ON CONFLICT DO NOTHING), share-lock the group's existing round rows, insert the rows
# of rounds still open, answer the rounds' states and the new rows' ids. A round opened here is
# invisible to others until the statement commits, so nobody can close it in between; the
# locked rows are read from the statement's snapshot, which cannot see the opened ones.
_OPEN_ROUNDS = (
    f"opened AS (INSERT INTO {_ROUND.name} (run_id, round, state, opened_at, deadline_at) "
    "SELECT n.run_id, n.round, 'open', %(now)s, %(deadline)s "
    "FROM unnest(%(new_runs)s::varchar[], %(new_rounds)s::bigint[]) AS n(run_id, round) "
    "ORDER BY 1, 2 ON CONFLICT DO NOTHING RETURNING run_id, round, state), "
)
_LOCK_AND_INSERT = (
    f"locked AS MATERIALIZED (SELECT run_id, round, state FROM {_ROUND.name} "
    "WHERE run_id = ANY(%(runs)s::varchar[]) AND round = ANY(%(rounds)s::bigint[]) "
    "ORDER BY run_id, round FOR SHARE), "
    "rounds AS (SELECT run_id, round, state, false AS new FROM locked{opened}), "
    f"ins AS (INSERT INTO {_ATT.name} ({', '.join(_GROUP_COLUMNS)}) "
    f"SELECT {', '.join(f'r.{c}' for c in _GROUP_COLUMNS)} "
    "FROM json_to_recordset(%(rows)s::json) AS r("
    f"{', '.join(f'{c} {t}' for c, t in _GROUP_TYPES.items())}) "
    "JOIN rounds AS l ON l.run_id = r.run_id AND l.round = r.round AND l.state = 'open' "
    "ON CONFLICT DO NOTHING RETURNING id, digest) "
    "SELECT run_id, round, state, new, NULL::bigint, NULL::varchar FROM rounds "
    "UNION ALL SELECT NULL, NULL, NULL, NULL, id, digest FROM ins"
)
_GROUP_WRITE = "WITH " + _LOCK_AND_INSERT.format(opened="")
_GROUP_OPEN_WRITE = (
    "WITH "
    + _OPEN_ROUNDS
    + _LOCK_AND_INSERT.format(opened=" UNION ALL SELECT run_id, round, state, true FROM opened")
)
_STATEMENT_TRIES = 3  # a round another writer opened after the statement's snapshot: once more


class Intake:
    def __init__(
        self, engine: Engine, indexer: Indexer, settings: Settings, book: RoundBook
    ) -> None:
        self.engine = engine
        self.indexer = indexer
        self.settings = settings
        self.book = book  # the rounds' states and the lock over writes (ledger.core.round_book)
        self.writer = GroupWriter(self.store)
        self.membership: Membership | None = None  # set by the service (ledger.intake.membership)
        self.closures: RunClosures | None = None  # set by the service (ledger.intake.closing)
        self._conn: Connection | None = None  # the writer's own (PostgreSQL: _autocommit)

    @property
    def snapshot(self) -> ChainSnapshot:
        return self.indexer.snapshot

    def check(self, items: list[AttestationIn]) -> Job:
        """Level 0 checks that need no database (CPU only; run them outside the lock): the
        cheap ones item by item, then every signature recovery of the request in one loop."""
        domain = self.indexer.chain.domain
        snap = self.snapshot
        job = Job(items=items, out=[Outcome(0)] * len(items))
        forms: list[tuple[int, Form]] = []
        for index, item in enumerate(items):
            try:
                check_sender(item, snap)  # cheap refusals first: no signature work for them
                forms.append((index, check_form(item, domain)))
            except AttestationRejected as exc:  # no verified sender: not recorded under it
                job.out[index] = _refusal(exc)
                log.debug("refused unverified attestation: %s", exc.code)
        signers = recover_signers([form for _, form in forms])
        for (index, form), signer in zip(forms, signers, strict=True):
            c: Checked | None = None
            try:
                c = check_signer(form, signer, domain)
                check_chain(c, snap, round_window=self.settings.round_window)
                job.checked.append((index, c))
            except AttestationRejected as exc:
                job.out[index] = _refusal(exc)
                if c is not None:  # only a verified sender's refusals are recorded under it
                    job.rejections.append(_rejection(items[index], exc, c))
                else:
                    log.debug("refused unverified attestation: %s", exc.code)
        return job

    def submit(self, items: list[AttestationIn]) -> list[Outcome]:
        """Verify and store ``items`` (one transaction); an outcome per item, in order."""
        job = self.check(items)
        self.store(job)
        return job.results()

    async def submit_async(self, items: list[AttestationIn]) -> list[Outcome]:
        """Like :meth:`submit`, but the write joins concurrent requests in one transaction."""
        job = self.check(items)
        if job.checked or job.rejections:
            await self.writer.write(job)
        return job.results()

    def store(self, job: Job) -> None:
        """Store a checked job under the round book's lock (:meth:`write`)."""
        with self.book.locked():
            self.write(job)

    def write(self, job: Job) -> None:
        """Store a checked job (the caller holds the round book's lock).

        SQLite: the slots already taken are read first, then the new rows inserted. PostgreSQL:
        the rows go in one statement that opens their rounds new to this process (in the same
        commit: one fsync per group, not two), share-locks the others and inserts those of open
        rounds, ``ON CONFLICT DO NOTHING`` (no read before: a slot already taken is simply not
        inserted; :meth:`_insert`), and only the rows that came back without an id in an open
        round are looked up, to answer an exact re-post with its id or refuse a conflicting
        one. On PostgreSQL each statement commits on its own (autocommit: no ``BEGIN`` and
        ``COMMIT`` round trips around a group that is one statement in the usual case): the
        insert is atomic and holds its rounds' locks until it commits, and rejection rows are
        an audit trail of their own. The round book changes only once what it describes
        committed.
        """
        items, out, rejections = job.items, job.out, job.rejections
        states: dict[tuple[str, int], str] = {}  # what the group is checked against
        known: dict[tuple[str, int], str] = {}  # what the database said (cached after commit)
        dirty: set[tuple[str, int]] = set()
        postgres = self.engine.dialect.name == "postgresql"
        with self._autocommit() if postgres else self.engine.begin() as conn:
            taken = {} if postgres else self._taken(conn, [c for _, c in job.checked])
            keys = {(c.run_hex, int(c.attestation.round)) for _, c in job.checked}
            if postgres:  # the database decides in the insert itself (see _insert)
                states = {k: self.book.state(k) or "open" for k in keys}
            if self.membership is not None:  # the joins of rounds new here, in one query
                self.membership.prime(conn, keys)
            seen: dict[Slot, tuple[int, str]] = {}
            received = utcnow()  # one moment for the group (one transaction)
            rows: list[dict[str, Any]] = []
            row_index: list[int] = []
            for index, c in job.checked:
                try:
                    placed = self._place(
                        conn, c, taken, seen, index=index, states=states, now=received
                    )
                except AttestationRejected as exc:
                    out[index] = _refusal(exc)
                    rejections.append(_rejection(items[index], exc, c))
                    continue
                if isinstance(placed, dict):
                    rows.append(placed)
                    row_index.append(index)
                else:
                    out[index] = placed
            if rows:
                opening = sorted(k for k in keys if self.book.state(k) is None) if postgres else []
                deadline_s = self.settings.round_deadline_s
                ids, found = self._insert(conn, rows, opening, deadline_s=deadline_s)
                states.update(found)
                known.update(found)
                dirty = self._outcomes(conn, job, rows, row_index, ids=ids, states=states)
                if postgres:  # committed: whatever follows, the book says what is stored
                    self.book.stored(known, dirty)
            if rejections:
                conn.execute(insert(_REJ), rejections)
        self.book.stored(known if postgres else states, dirty)

    @contextmanager
    def _autocommit(self) -> Iterator[Connection]:
        """The writer's own connection (PostgreSQL; used under the round book's lock), whose
        statements commit on their own. It is kept from one group to the next: a pooled
        checkout, its ping and its return cost about 320 us of the writer's CPU a group (1,240
        in all, at 3.8 attestations a group), and the group statement stays prepared on it. Any
        error closes it (a broken one leaves the pool); the next group opens another."""
        conn = self._conn
        if conn is None:
            conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            self._conn = conn
        try:
            yield conn
            conn.commit()  # ends SQLAlchemy's autobegun marker; nothing is sent in autocommit
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        """Give back the writer's connection (the caller holds the round book's lock)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Stop the writer and give back its connection."""
        self.writer.close()
        with self.book.locked():
            self._release()

    def _outcomes(
        self,
        conn: Connection,
        job: Job,
        rows: list[dict[str, Any]],
        row_index: list[int],
        *,
        ids: list[int | None],
        states: dict[tuple[str, int], str],
    ) -> set[tuple[str, int]]:
        """Each inserted row's outcome; a row without an id is a round closed meanwhile (by the
        leader: refused), an exact re-post (its stored id) or a conflict (refused). The rounds
        that got rows (the keeper re-checks their membership: ledger.intake.membership)."""
        items, out, rejections = job.items, job.out, job.rejections
        checked = dict(job.checked)
        closed = {
            at for at, (r, new_id) in enumerate(zip(rows, ids, strict=True))
            if new_id is None and states.get((r["run_id"], int(r["round"]))) != "open"
        }  # fmt: skip
        skipped = [rows[at] for at, i in enumerate(ids) if i is None and at not in closed]
        stored = self._taken_rows(conn, skipped) if skipped else {}
        dirty = set()
        for at, (index, row, new_id) in enumerate(zip(row_index, rows, ids, strict=True)):
            run, rnd = row["run_id"], int(row["round"])
            if new_id is not None:
                out[index] = Outcome(202, id=new_id)
                dirty.add((run, rnd))
                continue
            if at in closed:
                refusal = _round_closed(run, rnd, states.get((run, rnd)))
            else:
                row_id, digest = stored[(run, rnd, row["node"])]
                if digest == row["digest"]:  # an exact re-post: the same id
                    out[index] = Outcome(202, id=row_id)
                    continue
                refusal = _conflict(row)
            out[index] = _refusal(refusal)
            rejections.append(_rejection(items[index], refusal, checked[index]))
        return dirty

    @staticmethod
    def _insert(
        conn: Connection,
        rows: list[dict[str, Any]],
        opening: list[tuple[str, int]] | None = None,
        *,
        deadline_s: float = 0.0,
    ) -> tuple[list[int | None], dict[tuple[str, int], str]]:
        """Insert ``rows``; their ids in order, and (PostgreSQL) the states of their rounds.

        PostgreSQL: one statement (:data:`_GROUP_WRITE`, or :data:`_GROUP_OPEN_WRITE` when the
        group has rounds this process has not seen: ``opening``, opened in the same statement
        and so the same commit, one fsync, with a deadline ``deadline_s`` from now)
        share-locks the rows' rounds (until this transaction commits: closing a round is an
        ``UPDATE`` of its row, so it waits for every group that saw the round open, and a
        group after it sees it closed: a late attestation can never enter a closed or scored
        round, whatever another worker's or this process's cache says) and inserts, with ``ON
        CONFLICT DO NOTHING``, only the rows whose round is open; the rows go as one
        orjson-encoded parameter (11 us of client CPU per row, against 32 for COPY plus the
        reads before and after it). A row whose round is not open, or whose slot (or digest)
        is already stored, gets no id (``None``). A round that another writer opened after the
        statement's snapshot is seen by neither part: its rows go again. Elsewhere one ``INSERT
        .. RETURNING`` (a conflict raises; the caller checked the rounds).
        """
        if conn.dialect.name != "postgresql":
            many = insert(_ATT).returning(_ATT.c.id, sort_by_parameter_order=True)
            return [int(i) for i in conn.execute(many, rows).scalars().all()], {}
        got: dict[str, int] = {}
        states: dict[tuple[str, int], str] = {}
        todo = rows
        for _ in range(_STATEMENT_TRIES):
            params: dict[str, Any] = {
                "runs": sorted({r["run_id"] for r in todo}),
                "rounds": sorted({int(r["round"]) for r in todo}),
                "rows": orjson.dumps(todo).decode(),
            }
            if opening:
                now = utcnow()
                params.update(
                    new_runs=[run for run, _ in opening],
                    new_rounds=[round_ for _, round_ in opening],
                    now=now,
                    deadline=now + timedelta(seconds=deadline_s),
                )
            sql = _GROUP_OPEN_WRITE if opening else _GROUP_WRITE
            for run, round_, state, new, row_id, digest in conn.exec_driver_sql(sql, params).all():
                if row_id is None:
                    states[(str(run), int(round_))] = str(state)
                    if new:
                        log.info("round %d of run %s opened", round_, run)
                else:
                    got[digest] = int(row_id)
            todo = [
                r for r in todo
                if r["digest"] not in got and (r["run_id"], int(r["round"])) not in states
            ]  # fmt: skip
            if not todo:
                break
            opening = []  # they exist now: committed by the writer that opened them
        return [got.get(r["digest"]) for r in rows], states

    def _taken_rows(
        self, conn: Connection, rows: list[dict[str, Any]]
    ) -> dict[Slot, tuple[int, str]]:
        """(run, round, node) -> (id, digest) stored for the slots of ``rows``."""
        wanted = {(r["run_id"], int(r["round"]), r["node"]) for r in rows}
        return self._slots(conn, wanted)

    def _taken(self, conn: Connection, checked: list[Checked]) -> dict[Slot, tuple[int, str]]:
        """(run, round, node) -> (id, digest) for the slots of ``checked`` already stored."""
        if not checked:
            return {}
        wanted = {(c.run_hex, int(c.attestation.round), str(c.attestation.node)) for c in checked}
        return self._slots(conn, wanted)

    @staticmethod
    def _slots(conn: Connection, wanted: set[Slot]) -> dict[Slot, tuple[int, str]]:
        columns = (_ATT.c.run_id, _ATT.c.round, _ATT.c.node, _ATT.c.id, _ATT.c.digest)
        if conn.dialect.name == "postgresql":  # array parameters: one statement text, prepared
            runs = bindparam("runs", sorted({s[0] for s in wanted}), type_=ARRAY(String()))
            rounds = bindparam("rounds", sorted({s[1] for s in wanted}), type_=ARRAY(BigInteger()))
            nodes = bindparam("nodes", sorted({s[2] for s in wanted}), type_=ARRAY(String()))
            stmt = select(*columns).where(
                _ATT.c.run_id == any_(runs), _ATT.c.round == any_(rounds),
                _ATT.c.node == any_(nodes),
            )  # fmt: skip
        else:
            stmt = select(*columns).where(
                _ATT.c.run_id.in_({s[0] for s in wanted}),
                _ATT.c.round.in_({s[1] for s in wanted}),
                _ATT.c.node.in_({s[2] for s in wanted}),
            )
        found = {}
        for run, rnd, node, row_id, digest in conn.execute(stmt):
            if (run, rnd, node) in wanted:
                found[(run, rnd, node)] = (int(row_id), digest)
        return found

    def _place(
        self,
        conn: Connection,
        c: Checked,
        taken: dict[Slot, tuple[int, str]],
        seen: dict[Slot, tuple[int, str]],
        *,
        index: int,
        states: dict[tuple[str, int], str],
        now: datetime,
    ) -> dict[str, Any] | Outcome | int:
        """The row to insert, or the outcome of a duplicate (an int: same as that item)."""
        att = c.attestation
        run = c.run_hex
        key = (run, int(att.round))
        if self.closures is not None:
            self.closures.check(run, key[1])
        state = states.get(key) or self.book.state(key)
        if state is None:
            state = states[key] = self._open_round(conn, run, att.round)
        if state != "open":
            raise _round_closed(run, att.round, state)
        if self.membership is not None and not self.membership.admits(run, att.round, att.node):
            raise reject(
                "not_a_member",
                f"node {att.node} did not join round {att.round} of run {run} before it started: "
                "POST /v1/joins for the next round before it starts",
            )
        slot: Slot = (run, int(att.round), str(att.node))
        digest = "0x" + c.digest.hex()
        earlier, stored = seen.get(slot), taken.get(slot)
        if earlier is not None and earlier[1] == digest:
            return earlier[0]
        if stored is not None and stored[1] == digest:
            return Outcome(202, id=stored[0])
        if earlier is not None or stored is not None:
            raise _conflict({"node": att.node, "round": att.round, "run_id": run})
        if att.tokens >= _INT63 or att.config_version >= _INT63:
            raise reject("invalid_field", "tokens/configVersion: implausibly large (>= 2**63)")
        seen[slot] = (index, digest)
        row = stored_fields(att)
        row.update(
            digest=digest,
            signature="0x" + c.signature.hex(),
            members=json.dumps(list(c.members)) if c.members is not None else None,
            commits=json.dumps(list(c.commits)) if c.commits else None,
            received_at=now,
        )
        return row

    def _open_round(self, conn: Connection, run: str, round_: int) -> str:
        state = conn.execute(
            select(_ROUND.c.state).where(_ROUND.c.run_id == run, _ROUND.c.round == round_)
        ).scalar()
        if state is None:
            now = utcnow()
            conn.execute(
                insert(_ROUND).values(
                    run_id=run,
                    round=round_,
                    state="open",
                    opened_at=now,
                    deadline_at=now + timedelta(seconds=self.settings.round_deadline_s),
                )
            )
            state = "open"
            log.info("round %d of run %s opened", round_, run)
        return str(state)


def _round_closed(run: str, round_: int, state: str | None) -> AttestationRejected:
    return reject(
        "round_closed", f"round {round_} of run {run} is {state}: it no longer takes attestations"
    )


def _conflict(row: dict[str, Any]) -> AttestationRejected:
    return reject(
        "conflicting_attestation",
        f"node {row['node']} already attested round {row['round']} of run {row['run_id']} "
        "with different fields: one attestation per node per round",
    )


def _refusal(exc: AttestationRejected) -> Outcome:
    return Outcome(http_status(exc.code), code=exc.code, message=exc.message)


def _rejection(item: AttestationIn, exc: AttestationRejected, checked: Checked) -> dict[str, Any]:
    """The audit row of a refusal whose sender's signature verified (so it is theirs)."""
    fields = item.attestation
    return {
        "node": str(checked.attestation.node),
        "run_id": fields.runId.lower(),
        "round": str(fields.round),
        "code": exc.code,
        "message": exc.message,
        "digest": "0x" + checked.digest.hex(),
        "created_at": utcnow(),
    }
