"""Run one settlement tick and die (os._exit) right after sending commitRound, before recording.

Used by test_settlement.py: ``python -m tests.ledger.crash_worker <point>`` with the ledger's
settings in COLOCO_LEDGER_* environment variables. ``hang:<point>`` instead prints ``AT <point>``
and waits there to be killed from outside (``kill -9``: test_leases.py).
"""

from __future__ import annotations

import os
import sys
import time

from ledger.core.config import Settings
from ledger.service import Ledger


def main() -> None:
    point = sys.argv[1]
    hang = point.startswith("hang:")
    point = point.removeprefix("hang:")

    def die(where: str) -> None:
        if where == point and hang:
            print(f"AT {where}", flush=True)
            time.sleep(600)
        if where == point:
            os._exit(17)

    ledger = Ledger(Settings(), fault_hook=die)
    ledger.start(background=False)
    ledger.settler.tick()
    sys.exit(3)  # the fault point was never reached


if __name__ == "__main__":
    main()
