"""What a member does when the rendezvous host dies: where to meet next, and what to post there.

The store itself fails over (:class:`trainer.network.coordination.store.FailoverStore`): the
members reconnect to the successor their last signed round-open names (:func:`successors`). The
new store starts empty, so each member re-posts the signed values it still needs
(:class:`KeptValues`): the round-opens of this round and the one before (their members vouch for
the checkpoint a joiner adopts), its config read-outs and its checkpoint offers. Old rounds are
forgotten as new ones are kept, so a long run does not grow what it re-posts.
"""

from __future__ import annotations

import logging

from trainer.network.coordination.store import (
    Endpoint,
    FailoverStore,
    endpoint_text,
    parse_endpoint,
)
from trainer.network.members import Members

log = logging.getLogger(__name__)


def successors(last: Members | None) -> list[Endpoint]:
    """Where the members meet when the host dies: the last members' advertised endpoints, in
    address order (the same list on every member)."""
    if last is None:
        return []
    return [parse_endpoint(e) for e in last.endpoints if e]


class KeptValues:
    """The signed values this node re-posts at a successor host, by store key."""

    def __init__(self, store: FailoverStore) -> None:
        self.store = store
        self._values: dict[str, bytes] = {}
        store.on_failover.append(self.republish)

    def keep(self, key: str, value: bytes, family: str, round: int) -> None:
        """Remember ``key`` to re-post at a successor host; ``family`` keys of rounds before
        ``round - 1`` are forgotten (the store of a long run does not grow)."""

        def recent(k: str) -> bool:
            if not k.startswith(family):
                return True
            r = k[len(family) :].split("/", 1)[0]
            return not r.isdigit() or int(r) >= round - 1

        self._values = {k: v for k, v in self._values.items() if recent(k)}
        self._values[key] = value

    def set(self, key: str, value: bytes) -> None:
        """Post ``value`` under ``key`` now and keep it (a latest-value key such as
        ``current_round``: each post replaces the one kept)."""
        self.store.set(key, value)
        self._values[key] = value

    def republish(self) -> None:
        """Post every kept value again (called by the store once it reached a successor; may run
        in the heartbeat thread, so it iterates over a copy)."""
        values = list(self._values.items())
        for key, value in values:
            self.store.set(key, value)
        log.info("re-posted %d coordination values at %s", len(values),
                 endpoint_text(self.store.endpoint))  # fmt: skip
