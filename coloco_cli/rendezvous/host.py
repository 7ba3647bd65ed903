"""The run's rendezvous: hosts the `torch.distributed.TCPStore` every node connects to.

`coloco rendezvous serve --port P` (or `python -m coloco_cli.rendezvous.host --port P`) runs until
SIGTERM/SIGINT. The demo starts it as its own child process (so no node has to host it, and any
node may leave).
"""

from __future__ import annotations

import argparse
import logging

from trainer.network.rendezvous import serve

__all__ = ["main", "serve"]


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
