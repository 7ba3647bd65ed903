"""Heartbeats: a dead or stalled member is found in seconds, not at the collective timeout.

Every node runs a :class:`Heartbeat` thread that posts, every ``interval_s``, a signed
``HEARTBEAT`` message carrying a counter (``seq``) under ``hb/<address>``, over its own store
connection (so a main thread blocked in ``init_process_group`` never delays it), following the
node's rendezvous through failovers.

:class:`Liveness` is the reader: during a collective the node polls its members' heartbeats
(:func:`wait_work` replaces ``work.wait``) and a member whose counter has not advanced for
``timeout_s`` on this node's own clock (no clock is compared across nodes) is stalled: the wait
raises :class:`StalledError` naming it, the survivors drop the unfinished collective and re-form
the round without it at once instead of waiting out the collective timeout.

Threat model: ``hb/<address>`` is checked like every other value (signed by ``<address>``,
registered and active, this run, kind ``HEARTBEAT``). A beat carries the process's random
``session`` beside its counter: it counts when its counter is higher than any seen in that
session, or when its session is one this reader never saw (a restarted node counts at once, not
after it has counted past its old process's counter). A replayed old heartbeat counts at most once
per session, the first time a reader sees that session, so nobody can keep a dead node looking
alive without its key, and no replay makes a restarted node look stalled.

Whoever can write the store can hide a live node's heartbeats (overwrite or delete them); that
makes its peers drop it from a round, a delay bounded like every other denial of service on the
store (it rejoins the next round), never a way to make a node accept anything.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from protocol.coordination import Kind
from protocol.errors import CollectiveError
from trainer.network.coordination.board import Board
from trainer.network.coordination.store import Endpoint, endpoint_text, open_store

log = logging.getLogger(__name__)

_POLL_S = 0.01
_LIVENESS_POLL_S = 0.2
MAX_SESSIONS = 64
"""Sessions (processes) remembered per member: each old one revives a dead node at most once."""


def heartbeat_key(address: str) -> str:
    return f"hb/{address}"


class StalledError(CollectiveError):
    """A member's heartbeat stopped: the collective is dropped and the round re-forms."""

    def __init__(self, stalled: tuple[str, ...], silent_s: float) -> None:
        self.stalled = stalled
        super().__init__(
            f"no heartbeat from {list(stalled)} for {silent_s:.1f}s (dead or stalled): dropping "
            "the collective and re-forming the round without them"
        )


class Heartbeat:
    """This node's heartbeat thread (``start`` / ``stop``)."""

    def __init__(
        self,
        board: Board,
        endpoint: Callable[[], Endpoint],
        *,
        interval_s: float = 0.5,
        round: Callable[[], int] = lambda: 0,
        probe: Callable[[], object] | None = None,
    ) -> None:
        """``probe``: called when a beat fails (the node's failover-aware store ``check``), so a
        dead host is noticed and failed over from here, whatever the main thread is doing."""
        self.board = board
        self.probe = probe
        self.endpoint = endpoint
        self.interval_s = interval_s
        self.round = round
        self.seq = 0
        self.session = secrets.token_hex(8)
        """A nonce of this process: its counter starts again at 0 in a new one (after a restart)
        and readers follow it from there."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._client_ep: Endpoint | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None

    def beat(self) -> None:
        """Post one heartbeat (the thread calls this every ``interval_s``)."""
        ep = self.endpoint()
        if self._client is None or self._client_ep != ep:
            self._client = open_store(ep, host=False, timeout_s=2.0, op_timeout_s=5.0)
            self._client_ep = ep
        self.seq += 1
        payload = {"seq": self.seq, "session": self.session}
        msg = self.board.sign(Kind.HEARTBEAT, max(0, int(self.round())), 0, payload)
        self._client.set(self.board.store.scoped(heartbeat_key(self.board.address)), msg.to_wire())

    def _loop(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                self.beat()
                failing = False
            except Exception as exc:  # the host is gone or moving: retry at the next tick
                self._client = None
                if not failing:
                    log.info("heartbeat to %s failed (%s); probing the host",
                             endpoint_text(self.endpoint()), exc)  # fmt: skip
                failing = True
                if self.probe is not None:
                    try:
                        self.probe()  # fails over if the host is gone
                    except Exception as probe_exc:
                        log.warning("heartbeat probe: %s", probe_exc)
            self._stop.wait(self.interval_s)


class Liveness:
    """Which members' heartbeats stopped, on this node's clock."""

    def __init__(self, board: Board, timeout_s: float) -> None:
        self.board = board
        self.timeout_s = timeout_s
        self._seq: dict[str, dict[str, int]] = {}
        """member -> its sessions seen (oldest first, at most ``MAX_SESSIONS``) -> highest seq."""
        self._advanced: dict[str, float] = {}
        self._polled = 0.0
        self._raw: dict[str, bytes] = {}

    def reset(self, members: tuple[str, ...]) -> None:
        """Start watching ``members``: each has ``timeout_s`` from now to show a new beat."""
        now = time.monotonic()
        for m in members:
            self._advanced[m] = now
        self._polled = 0.0

    def poll(self, members: tuple[str, ...]) -> None:
        now = time.monotonic()
        if self._polled and now - self._polled > self.timeout_s / 2:
            # this node itself was not scheduled (or was stopped) for a while: that silence is
            # its own, not its peers'; they get a fresh timeout from now
            for m in members:
                self._advanced[m] = now
        for m in members:
            key = heartbeat_key(m)
            if not self.board.store.check([key]):
                continue
            raw = self.board.store.get(key)
            if raw == self._raw.get(m):
                continue  # unchanged since the last poll: nothing new to check
            self._raw[m] = raw
            msg = self.board.verify(raw, key, Kind.HEARTBEAT, None, 0, signer=m, cache=False)
            if msg is None:
                continue
            if self._advances(m, msg.body()):
                self._advanced[m] = now
        self._polled = now

    def _advances(self, member: str, body: dict[str, Any]) -> bool:
        """Whether a verified beat is news: a higher counter in a session already followed, or
        the first beat of a session never seen (a restart; a replay of an old session counts at
        most once, the first time this node sees it)."""
        seq, session = body.get("seq"), body.get("session", "")
        if not isinstance(seq, int) or not isinstance(session, str) or len(session) > 64:
            return False
        sessions = self._seq.setdefault(member, {})
        if session in sessions and seq <= sessions[session]:
            return False
        sessions[session] = seq
        while len(sessions) > MAX_SESSIONS:
            del sessions[next(iter(sessions))]
        return True

    def stalled(self, members: tuple[str, ...]) -> tuple[str, ...]:
        """Members whose counter has not advanced for ``timeout_s`` (polling first if due)."""
        now = time.monotonic()
        if now - self._polled >= _LIVENESS_POLL_S:
            self.poll(members)
        return tuple(m for m in members if now - self._advanced.get(m, now) > self.timeout_s)

    def check(self, members: tuple[str, ...]) -> None:
        """Raise :class:`StalledError` if a member's heartbeat stopped."""
        gone = self.stalled(members)
        if gone:
            now = time.monotonic()
            raise StalledError(gone, min(now - self._advanced[m] for m in gone))


# --- waiting on a collective with the heartbeats watched ------------------------------------------


class _Watch(threading.local):
    check: Callable[[], None] | None = None


_watch = _Watch()
"""The active check, per thread: the overlap schedule's background all-reduce is watched in its
own thread while the main thread computes (trainer.round.overlap)."""
_abandoned: list[Any] = []
_abandoned_lock = threading.Lock()  # a background all-reduce and the main thread share it
"""Collectives dropped while a peer was stalled. Kept referenced: letting a pending gloo work go
would make destroying its process group block until the op's own timeout."""


@contextmanager
def watching(check: Callable[[], None]) -> Iterator[None]:
    """While inside, :func:`wait_work` calls ``check`` (which raises to drop the collective)."""
    before, _watch.check = _watch.check, check
    try:
        yield
    finally:
        _watch.check = before


def is_watching() -> bool:
    """Whether a :func:`watching` check is active (collectives are then polled, not waited on)."""
    return _watch.check is not None


def wait_work(work: Any, timeout: timedelta) -> None:
    """``work.wait(timeout)``, but a stalled peer (the active :func:`watching` check) ends it
    early. Raises what the check raises, CollectiveError on the timeout, or the work's error."""
    check = _watch.check
    if check is None:
        work.wait(timeout=timeout)
        return
    with _abandoned_lock:
        _abandoned[:] = [w for w in _abandoned if not w.is_completed()]
    deadline = time.monotonic() + timeout.total_seconds()
    while not work.is_completed():
        try:
            check()
            if time.monotonic() > deadline:
                raise CollectiveError(f"collective did not finish within {timeout}")
        except CollectiveError:
            with _abandoned_lock:
                _abandoned.append(work)
            raise
        time.sleep(_POLL_S)
    work.wait(timeout=timeout)
