"""A second ledger process on the same PostgreSQL: close every open round (deadline passed).

Used by test_workers.py: ``python -m tests.ledger.round_closer`` with the ledger's settings in
COLOCO_LEDGER_* environment variables; prints the closed rounds' count.
"""

from __future__ import annotations

from datetime import timedelta

from ledger.core.config import Settings
from ledger.core.models import utcnow
from ledger.service import Ledger


def main() -> None:
    ledger = Ledger(Settings())
    ledger.start(background=False)
    closed = ledger.keeper.close_due(now=utcnow() + timedelta(days=1))
    print(len(closed))
    ledger.stop()


if __name__ == "__main__":
    main()
