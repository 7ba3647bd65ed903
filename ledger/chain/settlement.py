"""Settlement: commit a scored round on chain, exactly once, surviving crashes.

Each round moves through a :class:`~ledger.core.models.Settlement` row::

    intent  (root, checkpoint, tree recorded)   -> sign with the next nonce
    signed  (nonce, tx hash, raw tx recorded)   -> send
    sent                                        -> wait for the receipt
    mined   (round 'committed')                 -> wait for N confirmations
    final   (round 'final')

Before signing, and whenever a restart finds a row mid-way, the chain is asked first
(``lastRound``/``checkpointOf``, the recorded tx hash): a round already committed with our
checkpoint is adopted, a signed transaction the node never saw is re-sent byte for byte (same
nonce, same hash), and a nonce used by something else sends the round again with a fresh one.
So a crash anywhere neither commits twice (the contract also refuses a repeated round) nor skips.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence

from sqlalchemy import Engine, func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select
from web3.exceptions import Web3RPCError

from ledger.chain.client import LedgerChain
from ledger.chain.leases import contract_address, leaf_hashes, lease_leaves, leaves_json
from ledger.core.models import PayoutTotal, RoundState, Settlement
from ledger.core.retry import Backoff
from protocol.errors import ContractRevertError, SettlementError
from protocol.merkle import RewardsTree
from protocol.types import Address, Bytes32, RoundNumber, RunId

log = logging.getLogger(__name__)

FaultHook = Callable[[str], None]
_OPEN = ("intent", "signed", "sent", "mined")
_UNDERPRICED = ("less than block base fee", "underpriced", "fee cap less than", "fee too low")


def cumulative_amounts(session: Session) -> dict[str, int]:
    """Everything scored so far, per payout address (cumulative, never decreasing).

    Read from ``payout_total``, which scoring keeps (:func:`add_rewards`): one row per payout,
    whatever the length of the history.
    """
    return {p: int(a) for p, a in session.exec(select(PayoutTotal.payout, PayoutTotal.amount))}


def add_rewards(session: Session, rewards: dict[str, int]) -> None:
    """Add a scored round's rewards to the payout totals (in the scoring transaction)."""
    wanted = {p: v for p, v in rewards.items() if v > 0}
    if not wanted:
        return
    rows = session.exec(select(PayoutTotal).where(col(PayoutTotal.payout).in_(wanted))).all()
    found = {row.payout: row for row in rows}
    for payout, value in sorted(wanted.items()):
        row = found.get(payout) or PayoutTotal(payout=payout, amount="0")
        row.amount = str(int(row.amount) + value)
        session.add(row)


def _tree_total(tree_json: str) -> int:
    return sum(int(v) for _, v in json.loads(tree_json))


def reward_total(session: Session, row: Settlement) -> int:
    """The budget this commit carries on chain: what its cumulative tree adds to the previous
    settlement's (the contract caps each commit at rewardPerRound and claims at the budget)."""
    prev = session.exec(
        select(Settlement).where(col(Settlement.id) < row.id).order_by(col(Settlement.id).desc())
    ).first()
    return max(_tree_total(row.tree) - (_tree_total(prev.tree) if prev is not None else 0), 0)


def tree_of(amounts: dict[str, int], extra: Sequence[Bytes32] = ()) -> RewardsTree | None:
    """The rewards tree of cumulative ``amounts``, with ``extra`` leaves (the lease leaves of
    :mod:`ledger.chain.leases`) folded into the same root."""
    if not amounts and not extra:
        return None
    return RewardsTree.build(sorted((Address(a), v) for a, v in amounts.items()), extra)


class Settler:
    def __init__(
        self,
        engine: Engine,
        chain: LedgerChain,
        *,
        confirmations: int,
        fault_hook: FaultHook | None = None,
        stuck_after_s: float = 60.0,
    ) -> None:
        self.engine = engine
        self.chain = chain
        self.confirmations = confirmations
        self.fault_hook = fault_hook
        self.stuck_after_s = stuck_after_s
        self.lock = threading.Lock()
        self._pending_since: dict[str, float] = {}  # tx hash -> when first seen in the pool
        self.backoff = Backoff("settlement of (run, round)")

    def _fault(self, point: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(point)

    def record_intent(self, round_row: RoundState) -> Settlement:
        """Write the settlement intent of a scored round (idempotent, also when two callers
        race: the loser of the UNIQUE (run, round) insert returns the winner's row)."""
        try:
            return self._record_intent(round_row)
        except IntegrityError:
            existing = self._intent_of(round_row.run_id, round_row.round)
            if existing is None:
                raise
            return existing

    def _intent_of(self, run_id: str, round_: int) -> Settlement | None:
        with Session(self.engine, expire_on_commit=False) as session:
            return session.exec(
                select(Settlement).where(Settlement.run_id == run_id, Settlement.round == round_)
            ).first()

    def _record_intent(self, round_row: RoundState) -> Settlement:
        existing = self._intent_of(round_row.run_id, round_row.round)
        if existing is not None:
            return existing
        with Session(self.engine, expire_on_commit=False) as session:
            amounts = cumulative_amounts(session)
            leases = contract_address(self.chain.deployment)
            lease_rows = lease_leaves(session, round_row.run_id, round_row.round) if leases else []
            tree = tree_of(amounts, leaf_hashes(leases, lease_rows))
            root = "0x" + (tree.root.hex() if tree is not None else bytes(32).hex())
            if round_row.checkpoint is None:
                raise SettlementError(f"round {round_row.round} has no checkpoint to commit")
            row = Settlement(
                run_id=round_row.run_id,
                round=round_row.round,
                rewards_root=root,
                checkpoint=round_row.checkpoint,
                total_work=round_row.total_work or "0",
                attestations_root=round_row.attestations_root or "0x" + bytes(32).hex(),
                tree=json.dumps(sorted([a, str(v)] for a, v in amounts.items())),
                leases=leaves_json(lease_rows),
            )
            session.add(row)
            rnd = session.get(RoundState, round_row.id)
            if rnd is not None:
                rnd.rewards_root = root
                session.add(rnd)
            session.commit()
            log.info("settlement intent: run %s round %d root %s", row.run_id, row.round, root)
            return row

    def pending(self) -> list[Settlement]:
        with Session(self.engine, expire_on_commit=False) as session:
            return list(
                session.exec(
                    select(Settlement)
                    .where(col(Settlement.status).in_(_OPEN))
                    .order_by(col(Settlement.id))
                ).all()
            )

    def tick(self) -> None:
        """Advance every unfinished settlement one step (safe to call at any time).

        A settlement that fails (a revert, an RPC error) waits with backoff and is reported;
        the others go on: one bad round never holds up another run's.
        """
        with self.lock:
            for row in self.pending():
                key = (row.run_id, row.round)
                if not self.backoff.due(key):
                    continue
                try:
                    self._advance(row)
                except Exception as exc:  # isolate: report, back off, go on with the next
                    self.backoff.failed(key, exc)
                else:
                    self.backoff.succeeded(key)

    def drive(self, run_id: str, round_: int, *, max_steps: int = 50) -> Settlement:
        """Advance one settlement until it is mined (used for the genesis commit and tests)."""
        with self.lock:
            for _ in range(max_steps):
                with Session(self.engine, expire_on_commit=False) as session:
                    row = session.exec(
                        select(Settlement).where(
                            Settlement.run_id == run_id, Settlement.round == round_
                        )
                    ).one()
                if row.status in ("mined", "final", "conflict"):
                    return row
                self._advance(row)
                if row.status == "sent":
                    time.sleep(0.1)  # the receipt is not there yet
        raise SettlementError(
            f"round {round_} of run {run_id} is not mined after {max_steps} steps"
        )

    # --- the state machine ------------------------------------------------------------------

    def _save(self, row: Settlement, **changes: object) -> None:
        with Session(self.engine, expire_on_commit=False) as session:
            fresh = session.get(Settlement, row.id)
            assert fresh is not None
            for key, value in changes.items():
                setattr(fresh, key, value)
                setattr(row, key, value)
            session.add(fresh)
            if changes.get("status") in ("mined", "final", "conflict"):
                rnd = session.exec(
                    select(RoundState).where(
                        RoundState.run_id == row.run_id, RoundState.round == row.round
                    )
                ).first()
                if rnd is not None:
                    status = str(changes["status"])
                    rnd.state = {"mined": "committed", "final": "final"}.get(status, "final")
                    rnd.tx_hash = row.tx_hash
                    rnd.block_number = row.block_number
                    if status == "conflict":
                        rnd.note = "committed on chain by someone else with another checkpoint"
                    session.add(rnd)
            elif changes.get("status") in ("intent", "signed"):
                rnd = session.exec(
                    select(RoundState).where(
                        RoundState.run_id == row.run_id, RoundState.round == row.round
                    )
                ).first()
                if rnd is not None and rnd.state == "committed":  # its commit left the chain
                    rnd.state, rnd.tx_hash, rnd.block_number = "scored", None, None
                    session.add(rnd)
            session.commit()

    def _committed_on_chain(self, row: Settlement) -> bool | None:
        """True: committed with our checkpoint; False: not yet; None: someone else's checkpoint."""
        run = bytes.fromhex(row.run_id[2:])
        last = self.chain.last_round(run)
        if last is None or last < row.round:
            return False
        onchain = "0x" + self.chain.client.checkpoint_of(RunId(run), RoundNumber(row.round)).hex()
        if onchain == row.checkpoint:
            return True
        if int(onchain, 16) == 0:
            return False  # round skipped on chain; cannot be committed any more
        return None

    def _adopt(self, row: Settlement) -> None:
        found = self._committed_on_chain(row)
        if found is None:
            log.error("round %d of run %s committed by someone else", row.round, row.run_id)
            self._save(row, status="conflict")
        elif found:
            rcpt = self.chain.receipt(row.tx_hash) if row.tx_hash else None
            block = int(rcpt["blockNumber"]) if rcpt else self.chain.block_number()
            log.info("round %d of run %s is on chain: adopted", row.round, row.run_id)
            self._save(row, status="mined", block_number=block)
        else:
            raise SettlementError(
                f"round {row.round} of run {row.run_id} cannot be committed: the chain's last "
                "round is past it (a skipped round); check the committer and the chain"
            )

    def _advance(self, row: Settlement) -> None:
        if row.status == "intent":
            self._sign_and_send(row)
        elif row.status == "signed":
            self._resume_signed(row)
        elif row.status == "sent":
            self._check_receipt(row)
        elif row.status == "mined":
            self._confirm(row)

    def _confirm(self, row: Settlement) -> None:
        """Final once the commit is ``confirmations`` deep, its receipt re-read then (reorgs)."""
        head = self.chain.block_number()
        if row.block_number is None or head - row.block_number < self.confirmations:
            return
        rcpt = self.chain.receipt(row.tx_hash) if row.tx_hash else None
        if rcpt is not None and int(rcpt["status"]) == 1:
            block = int(rcpt["blockNumber"])
            if block != row.block_number:
                log.warning("round %d: commit moved to block %d by a reorg", row.round, block)
                self._save(row, block_number=block)  # count the depth again from there
            else:
                self._save(row, status="final")
            return
        found = self._committed_on_chain(row)
        if found is None:
            self._adopt(row)
        elif found and rcpt is None:
            self._save(row, status="final")  # adopted: committed by another of our hashes
        else:
            log.warning(
                "round %d of run %s: its commit left the chain (reorg); sending it again",
                row.round,
                row.run_id,
            )
            self._save(row, status="signed", block_number=None)

    def _budget(self, row: Settlement) -> int:
        """The reward total this commit carries, capped at the chain's compute pool per round."""
        with Session(self.engine, expire_on_commit=False) as session:
            budget = reward_total(session, row)
        cap = self.chain.reward_per_round()
        if budget > cap:
            log.warning(
                "round %d adds %d reward units, above the compute pool per round %d: committing "
                "the cap (claims beyond the committed budget wait for later rounds)",
                row.round,
                budget,
                cap,
            )
        return min(budget, cap)

    def _sign_and_send(self, row: Settlement) -> None:
        state = self._committed_on_chain(row)
        if state is not False:
            self._adopt(row)
            return
        nonce = self.chain.committer_nonce()
        budget = self._budget(row)
        try:
            tx_hash, raw = self.chain.sign_commit(
                run_id=bytes.fromhex(row.run_id[2:]),
                round_=row.round,
                rewards_root=bytes.fromhex(row.rewards_root[2:]),
                checkpoint=bytes.fromhex(row.checkpoint[2:]),
                total_work=int(row.total_work),
                attestations_root=bytes.fromhex(row.attestations_root[2:]),
                reward_total=budget,
                nonce=nonce,
            )
        except ContractRevertError:
            if self._committed_on_chain(row) is not False:
                self._adopt(row)
                return
            raise
        self._save(row, status="signed", nonce=nonce, tx_hash=tx_hash, raw_tx=raw)
        self._fault("signed")
        self.chain.send_raw(raw)
        self._fault("sent")
        self._save(row, status="sent")
        log.info("commitRound sent: run %s round %d tx %s", row.run_id, row.round, tx_hash)
        self._check_receipt(row)

    def _resume_signed(self, row: Settlement) -> None:
        assert row.tx_hash is not None and row.raw_tx is not None and row.nonce is not None
        if self.chain.receipt(row.tx_hash) is not None or self.chain.tx_known(row.tx_hash):
            self._save(row, status="sent")
            self._check_receipt(row)
            return
        if self._committed_on_chain(row) is not False:
            self._adopt(row)
            return
        if self.chain.committer_nonce("latest") > row.nonce:
            log.warning("nonce %d was used by another transaction: re-signing", row.nonce)
            self._save(row, status="intent", nonce=None, tx_hash=None, raw_tx=None)
            return
        log.info("re-sending the recorded commitRound of round %d (tx %s)", row.round, row.tx_hash)
        try:
            self.chain.send_raw(row.raw_tx)
        except Web3RPCError as exc:
            if not any(m in str(exc).lower() for m in _UNDERPRICED):
                raise
            log.warning("round %d: the node refuses the recorded fees (%s)", row.round, exc)
            self._replace(row)
            return
        self._save(row, status="sent")
        self._check_receipt(row)

    def _stuck(self, tx_hash: str) -> bool:
        since = self._pending_since.setdefault(tx_hash, time.monotonic())
        return time.monotonic() - since >= self.stuck_after_s

    def _replace(self, row: Settlement) -> None:
        """Re-sign a stuck commit with the same nonce and higher fees; record it, then send.

        Whichever version is mined wins: the old hash, if it is, is adopted from the chain.
        """
        assert row.tx_hash is not None and row.nonce is not None
        old = row.tx_hash
        fees = self.chain.replacement_fees(old)
        try:
            tx_hash, raw = self.chain.sign_commit(
                run_id=bytes.fromhex(row.run_id[2:]),
                round_=row.round,
                rewards_root=bytes.fromhex(row.rewards_root[2:]),
                checkpoint=bytes.fromhex(row.checkpoint[2:]),
                total_work=int(row.total_work),
                attestations_root=bytes.fromhex(row.attestations_root[2:]),
                reward_total=self._budget(row),
                nonce=row.nonce,
                fees=fees,
            )
        except ContractRevertError:
            if self._committed_on_chain(row) is not False:
                self._adopt(row)
                return
            raise
        self._save(row, status="signed", tx_hash=tx_hash, raw_tx=raw)
        self._pending_since.pop(old, None)
        log.warning(
            "commitRound of round %d stuck as %s: replaced by %s (fee cap %d, tip %d)",
            row.round, old, tx_hash, fees[0], fees[1],
        )  # fmt: skip
        self.chain.send_raw(raw)
        self._save(row, status="sent")

    def _check_receipt(self, row: Settlement) -> None:
        assert row.tx_hash is not None
        rcpt = self.chain.receipt(row.tx_hash)
        if rcpt is None:
            if not self.chain.tx_known(row.tx_hash):
                self._save(row, status="signed")  # dropped: re-send or re-sign next tick
            elif self._stuck(row.tx_hash):
                self._replace(row)
            return
        self._pending_since.pop(row.tx_hash, None)
        if int(rcpt["status"]) == 1:
            self._save(row, status="mined", block_number=int(rcpt["blockNumber"]))
            log.info(
                "round %d of run %s committed in block %s",
                row.round,
                row.run_id,
                rcpt["blockNumber"],
            )
            return
        if self._committed_on_chain(row) is not False:
            self._adopt(row)
        else:
            log.error("commitRound of round %d reverted: re-signing", row.round)
            self._save(row, status="intent", nonce=None, tx_hash=None, raw_tx=None)


def latest_committed(session: Session) -> Settlement | None:
    """The settlement whose root is the latest on chain (highest id among mined/final)."""
    return session.exec(
        select(Settlement)
        .where(col(Settlement.status).in_(("mined", "final")))
        .order_by(col(Settlement.id).desc())
    ).first()


def count_pending(session: Session) -> int:
    return int(
        session.exec(
            select(func.count()).select_from(Settlement).where(col(Settlement.status).in_(_OPEN))
        ).one()
    )
