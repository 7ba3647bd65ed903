"""What this process knows of its rounds' states, and the lock that orders changes to them.

A round is ``open`` (it takes attestations), then ``closing``, ``scored``, ``committed`` and
``final`` (:mod:`ledger.rounds.lifecycle`). Its ``round_state`` row is the truth; the book keeps
what this process last stored or read of each round it has seen, so that the intake's hot path
checks a round without reading its row, and which rounds got new attestations since the round
keeper last looked (it closes a complete round before its deadline).

One lock, :meth:`RoundBook.locked`, orders "is the round still open? insert into it" (the
intake's write, :mod:`ledger.intake.accept`) against closing a round (the keeper), storing a
run's genesis round and closing a run (the admin routes): an attestation never enters a round
after this process closed it. On PostgreSQL the database orders them across workers too (the
group statement share-locks its rounds' rows; closing is an ``UPDATE`` of the row). The book
changes only once what it describes has committed, under the lock; reading a round's state
needs no lock (a dict lookup).

Who writes what: the intake records the states it stored or read and the rounds it wrote
into (:meth:`stored`); the keeper marks the rounds it closes (:meth:`closing`) and takes the
rounds written into (:meth:`take_written`); the service loads every unfinished round at start
(:meth:`load`). The join route reads a round's state (:meth:`state`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager

Key = tuple[str, int]  # (run id, round)


class RoundBook:
    """The round-state cache, the set of rounds written into, and the lock over both."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[Key, str] = {}
        self._written: set[Key] = set()  # rounds with new attestations since take_written

    def locked(self) -> AbstractContextManager[bool]:
        """Hold while checking rounds and changing them (see the module docstring): the
        intake's writes, closing a round, storing a genesis round, closing a run. The intake's
        own connection is used under it too (:class:`ledger.intake.accept.Intake`)."""
        return self._lock

    def state(self, key: Key) -> str | None:
        """The round's state as this process last stored or read it (None: not seen here)."""
        return self._states.get(key)

    def load(self, states: Iterable[tuple[str, int, str]]) -> None:
        """Start from the stored ``(run, round, state)`` of every unfinished round."""
        with self._lock:
            for run, round_, state in states:
                self._states[(run, round_)] = state

    def stored(self, states: Mapping[Key, str], written: set[Key]) -> None:
        """A write committed: the states it stored or read, the rounds it added rows to (the
        caller holds :meth:`locked`)."""
        self._states.update(states)
        self._written |= written

    def closing(self, key: Key) -> None:
        """The keeper committed the round's move to ``closing`` (the caller holds
        :meth:`locked`): from now on the intake refuses it without asking the database."""
        self._states[key] = "closing"

    def take_written(self) -> set[Key]:
        """The rounds written into since the last call, and start a new set."""
        with self._lock:
            written, self._written = self._written, set()
        return written
