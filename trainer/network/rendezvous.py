"""A standalone rendezvous host: ``serve(host, port)`` runs the store every member connects to.

The host is not trusted: every value the members act on is signed and checked by each reader
(trainer/network/coordination/). Any member can host instead (``--host-rendezvous``), and when the
host dies the members fail over to the successor their last signed round-open names
(:mod:`trainer.network.coordination.store`). ``coloco rendezvous serve`` calls :func:`serve`.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType

from trainer.network.coordination.store import open_store

log = logging.getLogger(__name__)


def serve(
    host: str = "127.0.0.1",
    port: int = 29400,
    *,
    stop: threading.Event | None = None,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Host the store on ``host:port`` until ``stop`` is set or SIGTERM/SIGINT arrives.

    Signal handlers are installed only when called from the main thread.
    """
    store = open_store((host, port), host=True, timeout_s=300.0, op_timeout_s=300.0)
    done = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():

        def _stop(signum: int, frame: FrameType | None) -> None:
            done.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    store.set("rendezvous/ready", "1")
    log.info("rendezvous store on %s:%d (untrusted: members verify every value)", host, port)
    if on_ready is not None:
        on_ready()
    done.wait()
    log.info("rendezvous on %s:%d stopped", host, port)
