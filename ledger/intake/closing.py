"""Closed runs: after `POST /v1/runs/{run}/close` (admin) a run takes no round past its final one.

The organiser closes a run when its training is done (`coloco run close`). The rounds already in
flight at the ledger finish (the final round is at least the highest round the ledger has seen);
attestations and joins for any later round are refused with `run_closed` (409). The chain keeps
every committed round; releasing the final checkpoint is a governance vote.

Stored as one small JSON object (run -> final round) in the key-value table: no schema change,
read at start and by followers with the chain view, written by one admin call under the intake
lock (so no attestation opens a round past the final one while it is decided).
"""

from __future__ import annotations

import json
import logging

from sqlalchemy import Engine
from sqlmodel import Session, func, select

from ledger.core.models import KeyValue, RoundState
from ledger.intake.verify import reject

log = logging.getLogger(__name__)

CLOSED_KEY = "closed_runs"


class RunClosures:
    """Which runs are closed, and at which final round (an in-memory copy of the table)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.final: dict[str, int] = {}

    def load(self) -> None:
        with Session(self.engine) as session:
            row = session.get(KeyValue, CLOSED_KEY)
        self.final = {str(k): int(v) for k, v in json.loads(row.value).items()} if row else {}

    def check(self, run: str, round_: int) -> None:
        """Refuse work for a round past a closed run's final round (a dict lookup)."""
        final = self.final.get(run)
        if final is not None and round_ > final:
            raise reject(
                "run_closed",
                f"run {run} was closed by its organiser after round {final}: round {round_} "
                "will not be scored; stop the node (its work here earns nothing)",
            )

    def close(self, run: str, last_committed: int, final_round: int | None) -> int:
        """Close `run` (idempotent); returns its final round. The caller holds the intake lock."""
        with Session(self.engine) as session:
            row = session.get(KeyValue, CLOSED_KEY)
            final = {str(k): int(v) for k, v in json.loads(row.value).items()} if row else {}
            if run in final:
                self.final = final
                return final[run]
            highest = session.exec(
                select(func.max(RoundState.round)).where(RoundState.run_id == run)
            ).one()
            floor = max(last_committed, int(highest or 0))
            final[run] = floor if final_round is None else max(final_round, floor)
            session.merge(KeyValue(key=CLOSED_KEY, value=json.dumps(final, sort_keys=True)))
            session.commit()
        self.final = final
        log.info("run %s closed after round %d", run, final[run])
        return final[run]
