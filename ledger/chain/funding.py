"""ETH for compute: after a round's commit is on chain, commit the run's cumulative ETH root.

Backers' deposits in ``RunFunding`` pay compute contributors per verified work. For each round
the ContributionLedger has committed (and that paid compute rewards), the ledger commits one ETH
root: round ``r`` pays ``min(ethPerRound, deposits not yet committed)`` wei, split in proportion
to the round's compute rewards per payout address (floor, like the token rewards). The tree is
cumulative, like the rewards tree, and claims go against any root past its dispute window.

Nothing here is stored: the per-round ETH totals are on chain (``EthRootCommitted`` events carry
each root's cumulative total) and the per-round rewards are in the ledger's database, so the
tree of any committed round is rebuilt deterministically. A crash between sending and mining
only repeats the same root, which the contract refuses (``InvalidRoot``/``RoundNotIncreasing``).
A root revoked while it was the run's latest no longer counts (the contract uncommits its ETH and
the next root builds on the one before): :func:`fold_history` drops it, in chain order, for the
settler and for the indexed reads alike.

Capital: once an ETH root is final and not revoked, the settler calls ``accrueCapital`` for it
(anyone may), which mints the round's capital share into RunFunding's escrow within the run's
compute budget and the governed rate limit; a refusal (``NoCapitalToAccrue``,
``CapitalRateExceeded``) is logged and the root is tried again on a later tick.
Requests build the tree from the indexed events (:class:`ledger.reads.trees.EthTrees`, with
:func:`eth_amounts`, no RPC); the settler itself reads the chain, which is ahead of the
indexer's confirmation depth.

One sender: ETH roots are sent with the committer key that commits rounds. An ETH root is sent
only under the round settler's lock and only while no commitRound is signed or in flight, so its
nonce can never be one a recorded commit holds (the settler signs with the pending nonce, which
counts an ETH root already sent; ``transact`` waits for its receipt).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Engine, func
from sqlmodel import Session, col, select

from ledger.chain.client import LedgerChain
from ledger.core.models import Attestation, RoundState, Settlement
from ledger.judge.rules import split_rewards
from protocol.errors import ColocoError
from protocol.merkle import RewardsTree
from protocol.types import Address

if TYPE_CHECKING:
    from ledger.chain.settlement import Settler

log = logging.getLogger(__name__)

CONTRACT = "RunFunding"
_SETTLED = ("committed", "final")


@dataclass(frozen=True)
class RunFundingState:
    """``RunFunding.runOf(runId)``, by field name."""

    funding_end: int
    cancelled_at: int
    last_round: int
    has_round: bool
    total_deposited: int
    eth_committed: int
    eth_paid: int
    capital_pool: int
    eth_per_round: int

    @classmethod
    def from_tuple(cls, t: tuple[int, ...] | list[int]) -> RunFundingState:
        return cls(
            funding_end=int(t[0]),
            cancelled_at=int(t[1]),
            last_round=int(t[2]),
            has_round=bool(t[3]),
            total_deposited=int(t[4]),
            eth_committed=int(t[6]),
            eth_paid=int(t[7]),
            capital_pool=int(t[8]),
            eth_per_round=int(t[9]),
        )


def round_rewards(session: Session, run_id: str, rnd: int) -> dict[str, int]:
    """Compute rewards of one round, per payout address."""
    rows = session.exec(
        select(Attestation.payout, Attestation.reward).where(
            Attestation.run_id == run_id,
            Attestation.round == rnd,
            col(Attestation.payout).is_not(None),
        )
    ).all()
    out: dict[str, int] = {}
    for payout, reward in rows:
        if payout is not None and reward is not None and int(reward) > 0:
            out[payout] = out.get(payout, 0) + int(reward)
    return out


def fold_history(events: Iterable[tuple[str, str, int, int]]) -> list[tuple[int, int]]:
    """[(round, wei paid by that round)] of a run's ETH roots that count, from its
    ``(event name, root, round, totalWei)`` in chain order: ``EthRootCommitted`` appends a root,
    ``EthRootRevoked`` of the latest counted root drops it (RunFunding uncommits its ETH then);
    revoking an older root changes nothing (a later root built on it pays)."""
    kept: list[tuple[str, int, int]] = []
    for name, root, rnd, total in events:
        if name == "EthRootCommitted":
            kept.append((root, rnd, total))
        elif name == "EthRootRevoked" and kept and kept[-1][0] == root:
            kept.pop()
    out: list[tuple[int, int]] = []
    previous = 0
    for _, rnd, total in kept:
        out.append((rnd, total - previous))
        previous = total
    return out


def eth_amounts(session: Session, run_id: str, per_round: list[tuple[int, int]]) -> dict[str, int]:
    """Cumulative wei per payout after the rounds ``per_round`` = [(round, wei of that round)]."""
    out: dict[str, int] = {}
    for rnd, wei in per_round:
        rewards = round_rewards(session, run_id, rnd)
        payouts = sorted(rewards)
        shares = split_rewards(wei, {i: rewards[p] for i, p in enumerate(payouts)})
        for i, p in enumerate(payouts):
            if shares[i] > 0:
                out[p] = out.get(p, 0) + shares[i]
    return out


class FundingSettler:
    """Commits one ETH root per committed round of every funded run; a step of the worker."""

    def __init__(
        self, engine: Engine, chain: LedgerChain, settler: Settler, *, poll_s: float = 2.0
    ) -> None:
        self.engine = engine
        self.chain = chain
        self.settler = settler  # the other sender of the committer key: one queue (see above)
        self.enabled = CONTRACT in chain.deployment.contracts
        self.poll_s = poll_s  # ETH roots are not urgent: keep the worker's tick light
        self._polled_at = float("-inf")
        self._settled: dict[str, int] = {}  # run -> highest ledger round already looked at
        self._accrued: set[tuple[str, str]] = set()  # (run, root) accrued or never to accrue

    def state(self, run_id: str) -> RunFundingState:
        raw = self.chain.client.call(CONTRACT, "runOf", bytes.fromhex(run_id[2:]))
        return RunFundingState.from_tuple(tuple(raw))

    def root_events(self, run_id: str) -> list[tuple[str, str, int, int]]:
        """The run's ETH root events on chain now, in chain order: (name, root, round, totalWei)."""
        events = self.chain.client.contract(CONTRACT).events
        logs = []
        for event in (events.EthRootCommitted, events.EthRootRevoked):
            logs += event.get_logs(
                from_block=self.chain.deployment_block,
                argument_filters={"runId": bytes.fromhex(run_id[2:])},
            )
        out = []
        for entry in sorted(logs, key=lambda e: (e["blockNumber"], e["logIndex"])):
            args = entry["args"]
            out.append(
                (
                    str(entry["event"]),
                    "0x" + bytes(args["root"]).hex(),
                    int(args.get("round", 0)),
                    int(args.get("totalWei", 0)),
                )
            )
        return out

    def chain_history(self, run_id: str) -> list[tuple[int, int]]:
        """[(round, wei paid by that round)] of the run's counted ETH roots on chain now, oldest
        first (the settler's view; requests use the indexed
        :func:`ledger.reads.trees.eth_history`)."""
        return fold_history(self.root_events(run_id))

    def accrue(self, run_id: str) -> None:
        """Accrues the capital share of each final, unrevoked ETH root of the run not yet
        accrued (one transaction per root, under the settler's lock like ETH roots)."""
        funding = self.chain.client.contract(CONTRACT).functions
        now = int(self.chain.client.w3.eth.get_block("latest")["timestamp"])
        for name, root, _, _ in self.root_events(run_id):
            if name != "EthRootCommitted" or (run_id, root) in self._accrued:
                continue
            raw = bytes.fromhex(root[2:])
            finalizes_at, revoked, accrued = funding.rootOf(bytes.fromhex(run_id[2:]), raw).call()[
                :3
            ]
            if revoked or accrued:
                self._accrued.add((run_id, root))
                continue
            if int(finalizes_at) > now:
                return  # later roots finalize later still
            with self.settler.lock:
                if self.commits_in_flight():
                    return
                try:
                    self.chain.client.transact(
                        CONTRACT, "accrueCapital", bytes.fromhex(run_id[2:]), raw
                    )
                except ColocoError as exc:
                    log.info("capital of ETH root %s of run %s: %s", root, run_id, exc)
                    if "NoCapitalToAccrue" in str(exc):
                        self._accrued.add((run_id, root))
                    return
            self._accrued.add((run_id, root))
            log.info("capital of ETH root %s of run %s accrued", root, run_id)

    def commits_in_flight(self) -> int:
        """commitRound transactions signed or sent and not yet mined (they hold nonces)."""
        with Session(self.engine) as session:
            return int(
                session.exec(
                    select(func.count())
                    .select_from(Settlement)
                    .where(col(Settlement.status).in_(("signed", "sent")))
                ).one()
            )

    def tick(self) -> None:
        now = time.monotonic()
        if not self.enabled or now - self._polled_at < self.poll_s:
            return
        self._polled_at = now
        with Session(self.engine) as session:
            rounds = session.exec(
                select(RoundState.run_id, RoundState.round)
                .where(col(RoundState.state).in_(_SETTLED), RoundState.round > 0)
                .order_by(col(RoundState.run_id), col(RoundState.round))
            ).all()
        by_run: dict[str, list[int]] = {}
        for run_id, rnd in rounds:
            by_run.setdefault(run_id, []).append(int(rnd))
        for run_id, settled in by_run.items():
            try:
                if self._settled.get(run_id) != settled[-1] and self._settle_run(run_id, settled):
                    self._settled[run_id] = settled[-1]
                self.accrue(run_id)
            except ColocoError as exc:
                log.warning("ETH settlement of run %s: %s (retried next tick)", run_id, exc)

    def _settle_run(self, run_id: str, settled: list[int]) -> bool:
        """Commits the next ETH root of the run; True when nothing is left to commit."""
        st = self.state(run_id)
        if st.funding_end == 0 or st.cancelled_at != 0:
            return True  # not funded (yet: looked at again after the next commit) or cancelled
        todo = [r for r in settled if not st.has_round or r > st.last_round]
        if not todo:
            return True
        history = self.chain_history(run_id)
        for rnd in todo:
            with Session(self.engine) as session:
                rewards = round_rewards(session, run_id, rnd)
                wei = min(st.eth_per_round, st.total_deposited - st.eth_committed)
                if not rewards or wei <= 0:
                    continue  # nothing new to pay for this round (no work, or no ETH left)
                amounts = eth_amounts(session, run_id, [*history, (rnd, wei)])
            tree = RewardsTree.build(sorted((Address(a), v) for a, v in amounts.items()))
            total = st.eth_committed + wei
            with self.settler.lock:  # one sender of the committer key at a time
                if self.commits_in_flight():
                    log.info("ETH root of run %s round %d waits for a commitRound", run_id, rnd)
                    return False
                self.chain.client.transact(
                    CONTRACT, "commitEthRoot", bytes.fromhex(run_id[2:]), rnd, tree.root, total
                )
            log.info(
                "ETH root of run %s round %d: %d wei this round, %d in total, %d payouts",
                run_id,
                rnd,
                wei,
                total,
                len(amounts),
            )
            return rnd == todo[-1]
        return True
