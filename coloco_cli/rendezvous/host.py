"""The run's rendezvous: hosts the `torch.distributed.TCPStore` every node connects to.

`coloco rendezvous serve --port P` (or `python -m coloco_cli.rendezvous.host --port P`) runs until
SIGTERM/SIGINT. The demo starts it as its own child process (so no node has to host it, and any
node may leave).
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from datetime import timedelta
from types import FrameType

log = logging.getLogger("coloco.rendezvous")


def serve(host: str, port: int) -> None:
    """Host the store until a signal arrives."""
    import torch.distributed as dist

    store = dist.TCPStore(  # type: ignore[attr-defined]
        host, port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=300)
    )
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    store.set("rendezvous/ready", "1")
    log.info("rendezvous store on %s:%d", host, port)
    stop.wait()
    log.info("rendezvous stopped")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    serve(args.host, args.port)


if __name__ == "__main__":
    main()
