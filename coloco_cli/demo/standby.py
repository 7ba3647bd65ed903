"""A pre-warmed `coloco` command: import everything, wait for a gate file, then run the command.

`python -m coloco_cli.demo.standby GATE -- node run --run-id ...` loads torch, the trainer and the
default corpus first (the slow part of a node's start on a small machine), waits until the file
GATE exists, then runs `coloco node run ...` exactly as the console script would. The demo uses
it for the node that joins mid-run, so the join happens at a chosen round rather than whenever a
cold start happens to finish.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

log = logging.getLogger("coloco.standby")


def warm_up() -> None:
    """Import what `coloco node run` needs and build the default corpus (cached per process)."""
    import torch  # noqa: F401

    import coloco_cli.main  # noqa: F401
    import trainer.round.node  # noqa: F401
    from reference.data import Corpus

    Corpus.load(None)


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[2] != "--":
        raise SystemExit("usage: python -m coloco_cli.demo.standby GATE -- COLOCO-ARGS...")
    gate = Path(sys.argv[1])
    args = sys.argv[3:]
    warm_up()
    (gate.parent / (gate.name + ".ready")).write_text("1")
    while not gate.exists():
        time.sleep(0.05)
    from coloco_cli.main import main as coloco_main

    sys.argv = ["coloco", *args]
    coloco_main()


if __name__ == "__main__":
    main()
