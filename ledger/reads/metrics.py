"""Prometheus metrics for operators (``GET /metrics``), one registry per ledger.

Intake rate and refusals by code (counters), the group writer's queue depth, scoring time per
round, settlement lag (age of the oldest unfinished settlement), indexer lag (blocks), pending
transactions and failing parts (gauges). Gauges that need the database are refreshed by the
background worker's tick; the others are read when scraped.
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ledger.chain.indexer import Indexer
from ledger.intake.group_writer import GroupWriter
from ledger.intake.jobs import Outcome


class WorkerStatus(Protocol):
    """What the background worker (:class:`ledger.service.Ledger`) says of itself: whether it
    leads, and every step, round or settlement failing now with its error."""

    leading: bool

    def problems(self) -> dict[str, str]: ...


class Metrics:
    def __init__(self, writer: GroupWriter, indexer: Indexer, worker: WorkerStatus) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.accepted = Counter(
            "coloco_ledger_attestations_accepted", "Attestations answered 202.", registry=r
        )
        self.rejected = Counter(
            "coloco_ledger_attestations_rejected", "Attestations refused, by code.", ["code"],
            registry=r,
        )  # fmt: skip
        self.scoring_seconds = Histogram(
            "coloco_ledger_round_scoring_seconds",
            "Time to score one round (levels 1-2).",
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300),
            registry=r,
        )
        self.settlement_lag = Gauge(
            "coloco_ledger_settlement_lag_seconds",
            "Age of the oldest settlement not yet mined (0 when none).",
            registry=r,
        )
        self.pending_transactions = Gauge(
            "coloco_ledger_pending_transactions",
            "Settlements signed or sent, not yet mined.",
            registry=r,
        )
        queue = Gauge(
            "coloco_ledger_write_queue_depth", "Attestations waiting for the writer.", registry=r
        )
        queue.set_function(lambda: writer.queue_depth)
        lag = Gauge(
            "coloco_ledger_indexer_lag_blocks", "Chain head minus indexed block.", registry=r
        )
        lag.set_function(lambda: _indexer_lag(indexer))
        failing = Gauge(
            "coloco_ledger_failing", "Steps, rounds and settlements failing now.", registry=r
        )
        failing.set_function(lambda: len(worker.problems()))
        leader = Gauge("coloco_ledger_leader", "1 when this worker leads.", registry=r)
        leader.set_function(lambda: 1.0 if worker.leading else 0.0)

    def count(self, outcomes: list[Outcome]) -> None:
        accepted = 0
        for o in outcomes:
            if o.status == 202:
                accepted += 1
            else:
                self.rejected.labels(o.code or "unknown").inc()
        if accepted:
            self.accepted.inc(accepted)  # one locked add per request, not one per item

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))


def _indexer_lag(indexer: Indexer) -> float:
    snap = indexer.snapshot
    if snap.head is None or snap.indexed_block is None:
        return float("nan")
    return float(snap.head - snap.indexed_block)
