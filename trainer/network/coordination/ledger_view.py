"""The ledger's accepted joins of a round, as the rendezvous reads them.

The ledger decides a round's members (signed ``RoundJoin``s recorded before the round started,
ledger/intake/membership.py); a node it refused (``round_started``) trains from the next round. The
rendezvous closes its member list only from those accepted joins
(:meth:`trainer.network.membership.Rendezvous.join`): it never waits for a node the ledger refused,
and never puts in the all-reduce a node whose attestation the ledger would refuse (``not_a_member``:
its pseudo-gradient would be in the nodes' average and not in the ledger's outer step).

One GET per poll at most every ``poll_s``, a short timeout and no retries: the rendezvous loop
polls it and must not block on a slow ledger; an unreachable ledger reads as None (the rendezvous
then falls back to its own rule, as the node's join did). Once a round started its members are
final and kept. Trust: a ledger can hide a member (the ledger could refuse its attestation
anyway) or list one that never comes (the rendezvous then waits up to its timeout); it cannot
make a node train with a config or a checkpoint it did not check.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import httpx

from trainer.network.ledger_client import LedgerClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LedgerRound:
    members: frozenset[str]
    """Nodes whose join of the round the ledger recorded (checksummed addresses)."""
    started: bool
    """The ledger's join window passed: ``members`` is final."""


class LedgerMembers:
    """``view(round)``: the ledger's members of ``round`` of one run, or None when unreachable."""

    def __init__(
        self, client: LedgerClient, run_id: bytes, *, poll_s: float = 0.2, timeout_s: float = 2.0
    ) -> None:
        self.client = client
        self.run = "0x" + run_id.hex()
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self._final: dict[int, LedgerRound] = {}
        self._last: dict[int, tuple[float, LedgerRound | None]] = {}
        self._warned: set[int] = set()

    def __call__(self, round: int, *, fresh: bool = False) -> LedgerRound | None:
        if round in self._final:
            return self._final[round]
        now = time.monotonic()
        cached = self._last.get(round)
        if cached is not None and not fresh and now - cached[0] < self.poll_s:
            return cached[1]
        view = self._read(round)
        self._last = {r: v for r, v in self._last.items() if r >= round - 1} | {round: (now, view)}
        if view is not None and view.started:
            self._final = {r: v for r, v in self._final.items() if r >= round - 8}
            self._final[round] = view
        return view

    def _read(self, round: int) -> LedgerRound | None:
        path = f"/v1/runs/{self.run}/rounds/{round}/members"
        try:
            resp = self.client.http.get(path, timeout=self.timeout_s)
            body = resp.json() if resp.status_code == 200 else None
            if not isinstance(body, dict):
                raise ValueError(f"HTTP {resp.status_code}")
            members = body["members"]
            if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                raise ValueError("members is not a list of addresses")
            return LedgerRound(frozenset(members), body.get("started") is True)
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            if round in self._warned:
                return None
            self._warned = {r for r in self._warned if r >= round - 1} | {round}
            log.warning("round %d: the ledger's members are unreadable (%s); the rendezvous uses "
                        "its own rule", round, exc)  # fmt: skip
            return None
