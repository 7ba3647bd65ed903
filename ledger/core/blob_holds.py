"""What uploads in flight hold: upload slots and bytes, per sender, checked as the bytes arrive.

A node's quota covers the blobs it stores *and* the bytes its uploads in flight have received
(or declared in ``Content-Length``, whichever is more): ten uploads begun at once cannot each see
the quota free. A node has at most ``per_node`` uploads in flight, the ledger ``total``; unsigned
uploads (a checkpoint a run names, which anyone may bring) share one budget of
``anonymous_bytes`` in flight, since nobody pays for them. Refusals name the limit and what to do.

A sender's stored bytes are read from the database when its first upload in flight begins and
kept (with its own finished uploads added) until its last one ends, so no check waits on the
database under the lock; a blob collected meanwhile only makes the count err high.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from protocol.errors import LedgerError


@dataclass(frozen=True)
class UploadLimits:
    quota_bytes: int  # stored + in flight, per node
    per_node: int  # uploads in flight, per node
    total: int  # uploads in flight, all senders
    anonymous_bytes: int  # bytes in flight, all unsigned uploads together


@dataclass
class Hold:
    """One upload's share: its sender (None: unsigned) and the bytes it holds."""

    sender: str | None
    held: int = 0
    open: bool = True


class UploadHolds:
    def __init__(self, limits: UploadLimits, stored: Callable[[str], int]) -> None:
        self.limits = limits
        self._stored_of = stored
        self._lock = threading.Lock()
        self._count: dict[str | None, int] = {}
        self._held: dict[str | None, int] = {}
        self._stored: dict[str, int] = {}
        self.in_flight = 0

    def held_bytes(self, sender: str | None) -> int:
        with self._lock:
            return self._held.get(sender, 0)

    def open(self, sender: str | None, declared: int = 0) -> Hold:
        """Take an upload slot for ``sender`` and reserve ``declared`` bytes, or refuse."""
        stored = self._stored_of(sender) if sender is not None else 0  # outside the lock
        with self._lock:
            if self.in_flight >= self.limits.total:
                raise LedgerError(
                    f"the ledger has {self.in_flight} uploads in flight, its limit "
                    f"(COLOCO_LEDGER_BLOB_UPLOADS_TOTAL): retry in a few seconds",
                    code="too_many_uploads",
                )
            count = self._count.get(sender, 0)
            if sender is not None and count >= self.limits.per_node:
                raise LedgerError(
                    f"node {sender} has {count} uploads in flight, the most one node may "
                    f"(COLOCO_LEDGER_BLOB_UPLOADS_PER_NODE): finish one, then retry",
                    code="too_many_uploads",
                )
            if sender is not None and sender not in self._stored:
                self._stored[sender] = stored
            hold = Hold(sender)
            self._count[sender] = count + 1
            self.in_flight += 1
        try:
            self.grow(hold, declared)
        except LedgerError:
            self.close(hold)
            raise
        return hold

    def grow(self, hold: Hold, size: int) -> None:
        """Hold at least ``size`` bytes for this upload, or refuse (the caller aborts it)."""
        if size <= hold.held:
            return
        with self._lock:
            held = self._held.get(hold.sender, 0) + size - hold.held
            if hold.sender is None:
                if held > self.limits.anonymous_bytes:
                    raise LedgerError(
                        f"unsigned uploads would hold {held} bytes in flight, over their "
                        f"shared budget of {self.limits.anonymous_bytes} "
                        "(COLOCO_LEDGER_BLOB_ANONYMOUS_BYTES): sign the upload with a node's "
                        "key, or retry later",
                        code="too_many_uploads",
                    )
            else:
                stored = self._stored.get(hold.sender, 0)
                if stored + held > self.limits.quota_bytes:
                    raise LedgerError(
                        f"node {hold.sender} stores {stored} bytes of blobs and its uploads in "
                        f"flight would hold {held}; its quota is {self.limits.quota_bytes}: "
                        "finish or drop an upload, or wait until its rounds are scored (their "
                        "blobs are then collected)",
                        code="blob_quota_exceeded",
                    )
            self._held[hold.sender] = held
            hold.held = size

    def close(self, hold: Hold, *, stored: int = 0) -> None:
        """Give back the upload's slot and bytes; ``stored``: bytes it now stores for its sender."""
        with self._lock:
            if not hold.open:
                return
            hold.open = False
            sender = hold.sender
            self._held[sender] = self._held.get(sender, 0) - hold.held
            self._count[sender] -= 1
            self.in_flight -= 1
            if sender is not None:
                self._stored[sender] = self._stored.get(sender, 0) + stored
            if self._count[sender] == 0:  # nothing in flight: read the database next time
                del self._count[sender]
                self._held.pop(sender, None)
                if sender is not None:
                    self._stored.pop(sender, None)
