"""Round membership set by the protocol: signed joins recorded before the round started.

A node joins round r of a run with a signed :class:`protocol.join.RoundJoin`. Round r *starts*
``join_window_s`` after the later of its first join and the commit of round r-1; joins after that
are refused (``round_started``: join the next round). Once a round has joins, an attestation from
a node that did not join is refused (``not_a_member``), and the round closes early only when
every member attested, or when a majority of the members attested and every member that most of
them declare (``round_members``) attested: a node can neither close a round early on its own nor
exclude another (a member counts as needed when most attested members declare it); a member
that does not attest by the deadline is simply absent. A round nobody
joined keeps open membership and closes at its deadline only.

A no-show pays: a node that joined a round which closed without its attestation may not join
the next ``NO_SHOW_ROUNDS`` rounds for each such round among its last ``NO_SHOW_HISTORY``
(``no_show``). Registered nodes that join at the ledger and never train (never coming to the
rendezvous either) kept every round from closing early when they were half the members, round
after round; now they hold only the rounds they had joined before their first no-show was
known, for a number of rounds that shrinks as their penalty grows.

The member sets live in memory (loaded per round from the database on first use) because intake
consults them on its hot path; every join goes through this object, so the cache stays exact.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, Engine, Select, and_, tuple_
from sqlalchemy import select as sa_select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from ledger.chain.indexer import ChainSnapshot, Indexer
from ledger.core.models import Attestation, Join, RoundState, utcnow
from ledger.intake.verify import reject
from protocol.eip712 import Eip712Domain
from protocol.errors import SignatureError
from protocol.join import RoundJoin
from protocol.signing import check_signature, recover_digest

log = logging.getLogger(__name__)

Key = tuple[str, int]
NO_SHOW_ROUNDS = 2
"""Rounds a node may not join after each round it joined, that closed, and that it did not
attest (within the last ``NO_SHOW_HISTORY`` rounds): the cost of a no-show."""
NO_SHOW_HISTORY = 64
_CHUNK = 500  # rounds per query of Membership.refresh (bound parameters stay few)


_JOIN = Join.__table__  # type: ignore[attr-defined]
_ATT = Attestation.__table__  # type: ignore[attr-defined]
_STATE = RoundState.__table__  # type: ignore[attr-defined]


def missed_joins(columns: tuple[Any, ...], *where: ColumnElement[bool]) -> Select[Any]:
    """``columns`` of the joins whose round closed without the joiner's attestation (a missed
    round: signed work the ledger never received, or a join never trained), filtered by
    ``where``: the no-show rule's rows and a node's ``missed_rounds`` (GET /v1/nodes)."""
    return (
        sa_select(*columns)
        .join(_STATE, and_(_STATE.c.run_id == _JOIN.c.run_id, _STATE.c.round == _JOIN.c.round))
        .outerjoin(
            _ATT,
            and_(
                _ATT.c.run_id == _JOIN.c.run_id,
                _ATT.c.round == _JOIN.c.round,
                _ATT.c.node == _JOIN.c.node,
            ),
        )
        .where(_STATE.c.state != "open", _ATT.c.id.is_(None), *where)
    )


# PostgreSQL: the joins of a list of rounds as two array parameters, one statement text whatever
# the number of rounds (psycopg prepares it server-side): no SQLAlchemy compile of an IN list
# of tuples per call, which cost 0.8 ms of CPU per group commit (8 us per item of a batch)
_JOINS_OF_ROUNDS = (
    f"SELECT j.run_id, j.round, j.node, j.created_at FROM {_JOIN.name} AS j "
    "JOIN unnest(%(runs)s::varchar[], %(rounds)s::bigint[]) AS k(run_id, round) "
    "ON j.run_id = k.run_id AND j.round = k.round"
)


def _joins_of(conn: Connection, keys: list[Key]) -> Iterable[tuple[Any, ...]]:
    """(run_id, round, node, created_at) of every join of the rounds ``keys``, in one query."""
    if conn.dialect.name == "postgresql":
        params = {"runs": [run for run, _ in keys], "rounds": [round_ for _, round_ in keys]}
        return [tuple(row) for row in conn.exec_driver_sql(_JOINS_OF_ROUNDS, params).all()]
    return [
        tuple(row)
        for row in conn.execute(
            select(_JOIN.c.run_id, _JOIN.c.round, _JOIN.c.node, _JOIN.c.created_at).where(
                tuple_(_JOIN.c.run_id, _JOIN.c.round).in_(keys)
            )
        )
    ]


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


@dataclass
class RoundMembers:
    joined: dict[str, datetime]
    starts_at: datetime | None  # None: round r-1 still open, the join window has not begun

    def started(self, now: datetime) -> bool:
        return self.starts_at is not None and now >= self.starts_at


class Membership:
    def __init__(self, engine: Engine, indexer: Indexer, *, join_window_s: float) -> None:
        self.engine = engine
        self.indexer = indexer
        self.window = timedelta(seconds=join_window_s)
        self._cache: dict[Key, dict[str, datetime]] = {}
        self._lock = threading.Lock()
        self._committed_seen: dict[Key, datetime] = {}
        self._waiting: set[Key] = set()  # rounds with joins that have not started yet

    # --- reads ------------------------------------------------------------------------------

    def joined(self, run: str, round_: int, *, fresh: bool = False) -> dict[str, datetime]:
        """node -> join time; ``fresh`` reads the database (another worker may have recorded
        a join this process has not seen)."""
        key = (run, round_)
        found = None if fresh else self._cache.get(key)
        if found is None:
            with Session(self.engine) as session:
                rows = session.exec(
                    select(Join.node, Join.created_at).where(
                        Join.run_id == run, Join.round == round_
                    )
                ).all()
            found = {node: _aware(at) for node, at in rows}
            with self._lock:
                if fresh:  # a join recorded since the read above stays (joins are never undone;
                    # two joins at once lost one here, and the round started without it)
                    found = self._cache.get(key, {}) | found
                    self._cache[key] = found
                else:
                    found = self._cache.setdefault(key, found)
        return found

    def refresh(self, keys: list[Key]) -> dict[Key, dict[str, datetime]]:
        """``joined(key, fresh=True)`` for every key, in one query (the keeper's pass over its
        dirty rounds: one query per round, each a pooled session, was a quarter of the
        server's CPU under batch load)."""
        if not keys:
            return {}
        found: dict[Key, dict[str, datetime]] = {k: {} for k in keys}
        with self.engine.connect() as conn:
            for start in range(0, len(keys), _CHUNK):
                for run, round_, node, at in _joins_of(conn, keys[start : start + _CHUNK]):
                    found[(str(run), int(round_))][str(node)] = _aware(at)
        with self._lock:  # as in joined(fresh=True): a join recorded since the read stays
            for key, joined in found.items():
                found[key] = self._cache[key] = self._cache.get(key, {}) | joined
        return found

    def prime(self, conn: Connection, keys: set[Key]) -> None:
        """Load the joins of the rounds of ``keys`` not cached yet, in one query on ``conn``
        (intake's transaction: no second connection, no query per round in the group)."""
        missing = [k for k in keys if k not in self._cache]
        if not missing:
            return
        found: dict[Key, dict[str, datetime]] = {k: {} for k in missing}
        for run, round_, node, at in _joins_of(conn, missing):
            found[(str(run), int(round_))][str(node)] = _aware(at)
        with self._lock:
            for key, joined in found.items():
                self._cache.setdefault(key, joined)

    def members(self, run: str, round_: int) -> frozenset[str] | None:
        """The round's members, or None when nobody joined it (open membership)."""
        joined = self.joined(run, round_, fresh=True)
        return frozenset(joined) if joined else None

    def admits(self, run: str, round_: int, node: str) -> bool:
        joined = self.joined(run, round_)
        if not joined or node in joined:
            return True  # scoring re-reads the members from the database (several workers)
        joined = self.joined(run, round_, fresh=True)  # a miss: ask the database once
        return node in joined

    def state(self, run: str, round_: int) -> RoundMembers:
        joined = self.joined(run, round_)
        return RoundMembers(dict(joined), self._starts_at(run, round_, joined))

    def _starts_at(self, run: str, round_: int, joined: dict[str, datetime]) -> datetime | None:
        """``join_window_s`` after the later of the first join and the moment this ledger saw
        round r-1 committed on chain (None: r-1 is not committed yet, joins are still open)."""
        if not joined:
            return None
        if self.indexer.snapshot.last_round.get(run, -1) < round_ - 1:
            return None
        seen = self._committed_seen.setdefault((run, round_ - 1), utcnow())
        return max(min(joined.values()), seen) + self.window

    # --- joins ------------------------------------------------------------------------------

    def join(
        self,
        join: RoundJoin,
        signature: str,
        domain: Eip712Domain,
        snap: ChainSnapshot,
        *,
        round_window: int,
        round_state: str | None,
    ) -> RoundMembers:
        """Verify and record a signed join (idempotent); the round's members so far."""
        run = "0x" + join.run_id.hex()
        key = (run, int(join.round))
        if join.node in self.joined(*key):
            return self.state(*key)
        _check_join_chain(join, run, snap, round_window)  # cheap checks before recovery
        _check_one_key_per_node(join, run, snap, self.joined(*key, fresh=True))
        try:
            sig = check_signature(signature)
            signer = recover_digest(join.digest(domain), sig)
        except SignatureError as exc:
            raise reject("bad_signature", str(exc)) from None
        if signer != join.node:
            raise reject(
                "signer_mismatch",
                f"join signature recovers to {signer}, not to node {join.node}: sign the "
                "RoundJoin with the node's key (GET /v1/eip712 for the domain)",
            )
        self._check_no_shows(run, int(join.round), join.node)
        if round_state is not None and round_state != "open":
            raise reject(
                "round_closed", f"round {join.round} of run {run} is {round_state}: join the next"
            )
        now = utcnow()
        current = self.state(*key)
        if current.started(now):
            raise reject(
                "round_started",
                f"round {join.round} of run {run} started at {current.starts_at}: its members "
                f"are fixed; join round {join.round + 1} before it starts",
            )
        with Session(self.engine) as session:
            session.add(
                Join(run_id=run, round=join.round, node=join.node, signature="0x" + sig.hex())
            )
            try:
                session.commit()
            except IntegrityError:
                session.rollback()
        with self._lock:
            self._cache.setdefault(key, {}).setdefault(join.node, now)
        self._waiting.add(key)
        state = self.state(*key)
        log.info("node %s joined round %d of run %s", join.node, join.round, run)
        return state

    def _check_no_shows(self, run: str, round_: int, node: str) -> None:
        """Refuse ``node``'s join of ``round_`` while it pays for its no-shows: rounds it joined
        that closed without its attestation (a node that joins at the ledger and never trains
        held every such round open to its deadline when it was half the members)."""
        query = missed_joins(
            (_JOIN.c.round,),
            _JOIN.c.run_id == run,
            _JOIN.c.node == node,
            _JOIN.c.round < round_,
            _JOIN.c.round >= round_ - NO_SHOW_HISTORY,
        )
        with self.engine.connect() as conn:
            missed = sorted(int(r) for (r,) in conn.execute(query))
        if not missed:
            return
        until = missed[-1] + NO_SHOW_ROUNDS * len(missed)
        if round_ <= until:
            raise reject(
                "no_show",
                f"node {node} joined round{'s' if len(missed) > 1 else ''} "
                f"{', '.join(map(str, missed))} of run {run} and did not attest "
                f"{'them' if len(missed) > 1 else 'it'}: it may join again from round "
                f"{until + 1} (each round joined and not attested costs {NO_SHOW_ROUNDS} rounds)",
            )

    def due(self, now: datetime) -> set[Key]:
        """Rounds that started since the last call (the keeper re-checks whether they close)."""
        done = set()
        for key in list(self._waiting):
            starts = self._starts_at(key[0], key[1], self.joined(*key))
            if starts is not None and now >= starts:
                done.add(key)
                self._waiting.discard(key)
        return done

    # --- closing ----------------------------------------------------------------------------

    def complete(
        self, run: str, round_: int, declared: dict[str, list[str] | None], now: datetime
    ) -> tuple[set[str], bool]:
        """(expected members, whether the round may close before its deadline).

        ``declared``: attested node -> the ``round_members`` it declared (None: none).
        """
        self.joined(run, round_, fresh=True)
        state = self.state(run, round_)
        if not state.joined:
            return set(declared), False
        members = set(state.joined)
        if not state.started(now):
            self._waiting.add((run, round_))  # re-checked when it starts (also after a restart)
            return members, False
        attested = members & set(declared)
        if members <= attested:
            return members, True
        if 2 * len(attested) <= len(members):
            return members, False
        votes: dict[str, int] = {}
        for node in attested:  # no declaration: the node counts on every member
            for m in set(declared[node] or members) & members:
                votes[m] = votes.get(m, 0) + 1
        needed = {m for m, n in votes.items() if 2 * n > len(attested)}
        return members, needed <= attested


def _check_one_key_per_node(
    join: RoundJoin, run: str, snap: ChainSnapshot, joined: dict[str, datetime]
) -> None:
    """A node is one member per round whatever its keys: after a key rotation the new key may
    not join a round the node's old key already joined (two shares of one round's reward)."""
    for other in snap.keys_of(join.node):
        if other != join.node and other in joined:
            raise reject(
                "node_already_joined",
                f"node id {snap.node_id_of(join.node)} already joined round {join.round} of run "
                f"{run} with its earlier key {other}: a node is one member per round; join "
                f"round {join.round + 1} with key {join.node}",
            )


def _check_join_chain(join: RoundJoin, run: str, snap: ChainSnapshot, round_window: int) -> None:
    if snap.config is None:
        raise reject("chain_not_indexed", "the ledger has not indexed the chain yet: retry")
    if not snap.is_active(join.node):
        raise reject(
            "not_staked",
            f"node {join.node} is not registered and staked: `coloco node register` and stake",
        )
    last = snap.last_round.get(run)
    if last is None:
        raise reject("unknown_run", f"run {run} has no genesis commit on chain")
    if join.round <= last:
        raise reject("stale_round", f"round {join.round} of run {run} is already committed")
    if join.round > last + round_window:
        raise reject(
            "future_round",
            f"round {join.round} is in the future: rounds {last + 1}..{last + round_window} "
            "take joins",
        )
