"""The connection to the rendezvous store, with failover to a deterministic successor.

The store is a ``torch.distributed.TCPStore`` that any member (or ``coloco rendezvous serve``)
hosts. When its host dies, the next store call fails with ``DistNetworkError``; the node then walks
the successor list (the endpoints the last round's members advertised in their signed joins,
sorted by member address, the dead endpoint left out): it hosts the store itself when the
successor is its own endpoint, else connects to it (waiting up to ``failover_wait_s`` for the
successor to notice and start hosting). Every member walks the same list, so they meet at the
same successor. The call that failed is retried there, and ``on_failover`` callbacks re-post
what the node had published (the new store starts empty); the round in flight restarts at its
join, earlier rounds are kept by every member.

A key that is merely absent is not a failure: callers ``check`` before ``get``.

Every key a member reads or writes is scoped by its run (``namespace``: ``run/<run id>/``, see
:func:`run_namespace`), so a rendezvous host reused for the next run is harmless: the new run's
members never meet the last run's joins, round-opens or process-group addresses under the same
key (a shared ``members/1/0`` once stalled round 1 on Gloo connect timeouts to dead ranks and
"stale" refusals). Keys under ``rendezvous/`` are the host's own and are not scoped.

Calls are serialized by a lock, so the node's heartbeat thread (:mod:`~trainer.network.coordination.
heartbeat`) can probe the host too: when the host dies, every member notices within a heartbeat
interval and fails over, even while its main thread trains or waits on a collective; members do
not split because one noticed late.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from protocol.errors import CollectiveError

log = logging.getLogger(__name__)

Endpoint = tuple[str, int]


def parse_endpoint(text: str) -> Endpoint:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise CollectiveError(f"rendezvous endpoint {text!r}: expected HOST:PORT")
    return host or "127.0.0.1", int(port)


def endpoint_text(ep: Endpoint) -> str:
    return f"{ep[0]}:{ep[1]}"


def open_store(ep: Endpoint, *, host: bool, timeout_s: float, op_timeout_s: float) -> Any:
    try:
        store = dist.TCPStore(  # type: ignore[attr-defined]
            ep[0], ep[1], is_master=host, wait_for_workers=False,
            timeout=timedelta(seconds=timeout_s),
        )  # fmt: skip
    except (RuntimeError, dist.DistError) as exc:
        raise CollectiveError(
            f"cannot {'host' if host else 'reach'} the rendezvous at {endpoint_text(ep)}: {exc}. "
            "Is the coordinator running? Check --rendezvous host:port and the firewall."
        ) from exc
    store.set_timeout(timedelta(seconds=op_timeout_s))
    return store


HOST_KEYS = "rendezvous/"
"""Keys the host itself writes (``rendezvous/ready``): the same for every run."""


def run_namespace(run_id: bytes) -> str:
    """The key prefix of one run at a shared rendezvous: ``run/<first 8 bytes of its id>/``."""
    return f"run/{run_id[:8].hex()}/"


def _lost(exc: BaseException) -> bool:
    """The host is gone (not merely a key that did not appear in time)."""
    if isinstance(exc, dist.DistNetworkError):
        return True
    text = str(exc)
    return any(s in text for s in ("Broken pipe", "Connection reset", "Connection refused"))


class FailoverStore:
    """A TCPStore client that moves to the successor host when the current one dies."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        host: bool = False,
        own_endpoint: Endpoint | None = None,
        connect_timeout_s: float = 20.0,
        op_timeout_s: float = 60.0,
        failover_wait_s: float = 30.0,
        namespace: str = "",
    ) -> None:
        self.endpoint = endpoint
        self.namespace = namespace
        """Prefix of every key but the host's own (:func:`run_namespace`)."""
        self.own_endpoint = own_endpoint
        self.connect_timeout_s = connect_timeout_s
        self.op_timeout_s = op_timeout_s
        self.failover_wait_s = failover_wait_s
        self.successors: Callable[[], list[Endpoint]] = list
        self.on_failover: list[Callable[[], None]] = []
        self.dead: list[Endpoint] = []
        self.failovers: list[str] = []
        """"dead -> successor" for every failover (the node's events)."""
        self.lock = threading.RLock()
        self.store = open_store(endpoint, host=host, timeout_s=connect_timeout_s,
                                op_timeout_s=op_timeout_s)  # fmt: skip

    # --- the store calls the rendezvous uses ----------------------------------------------------

    def _call(self, name: str, *args: Any) -> Any:
        with self.lock:
            store = self.store
            try:
                return getattr(store, name)(*args)
            except (RuntimeError, dist.DistError) as exc:
                if not _lost(exc):
                    raise
                if self.store is store:  # not already moved by another thread
                    self.failover(exc)
                if name == "get" and not self.store.check([args[0]]):
                    # the caller checked the key at the dead host; the successor does not hold
                    # it: b"" (readers refuse it), never a get that waits for a key to appear
                    return b""
                return getattr(self.store, name)(*args)

    def scoped(self, key: str) -> str:
        """``key`` as stored at the host: under this run's namespace (host keys as they are)."""
        return key if key.startswith(HOST_KEYS) else self.namespace + key

    def set(self, key: str, value: bytes | str) -> None:
        self._call("set", self.scoped(key), value)

    def get(self, key: str) -> bytes:
        return bytes(self._call("get", self.scoped(key)))

    def add(self, key: str, amount: int) -> int:
        return int(self._call("add", self.scoped(key), amount))

    def check(self, keys: list[str]) -> bool:
        return bool(self._call("check", [self.scoped(k) for k in keys]))

    def compare_set(self, key: str, expected: bytes | str, desired: bytes) -> bytes:
        return bytes(self._call("compare_set", self.scoped(key), expected, desired))

    def wait(self, keys: list[str]) -> None:
        self._call("wait", [self.scoped(k) for k in keys])

    def delete_key(self, key: str) -> bool:
        return bool(self._call("delete_key", self.scoped(key)))

    # --- failover -------------------------------------------------------------------------------

    def failover(self, cause: BaseException) -> None:
        """Move to the first live successor (hosting it if it is this node's own endpoint)."""
        dead = self.endpoint
        self.dead.append(dead)
        log.warning("rendezvous at %s lost (%s); failing over", endpoint_text(dead), cause)
        candidates = [ep for ep in dict.fromkeys(self.successors()) if ep not in self.dead]
        for ep in candidates:
            mine = ep == self.own_endpoint
            try:
                self.store = open_store(ep, host=mine, timeout_s=self.failover_wait_s,
                                        op_timeout_s=self.op_timeout_s)  # fmt: skip
            except CollectiveError as exc:
                log.warning("successor %s unavailable: %s", endpoint_text(ep), exc.message)
                self.dead.append(ep)
                continue
            self.endpoint = ep
            self.failovers.append(f"{endpoint_text(dead)} -> {endpoint_text(ep)}")
            where = "hosted here" if mine else "hosted by a peer"
            log.warning("rendezvous failed over from %s to %s (%s)", endpoint_text(dead),
                        endpoint_text(ep), where)  # fmt: skip
            for callback in self.on_failover:
                callback()
            return
        raise CollectiveError(
            f"the rendezvous at {endpoint_text(dead)} is gone and no successor is reachable "
            f"(tried {[endpoint_text(e) for e in candidates]}); restart with --rendezvous "
            "pointing at a live member's endpoint"
        ) from cause
