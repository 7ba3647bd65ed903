"""The ledger's parts wired together, and the background worker that drives them.

One :class:`Ledger` per process: the database engine, the chain door, the indexer (and its
in-memory snapshot), the round book (the rounds' states this process knows, and the lock over
changing them), intake, the blob store, the round keeper and the settler. The worker thread
runs ``index -> close -> score -> settle -> checkpoint`` every ``lifecycle_poll_s``. Each step
fails on its own (an RPC outage stops indexing and settling, never closing or the WAL checkpoint),
and inside a step each round and settlement fails on its own (:mod:`ledger.core.retry`): what failed
is retried with backoff and reported by :meth:`Ledger.problems` (readiness, metrics).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy import Engine, exists, func
from sqlmodel import Session, col, select

from ledger.chain.client import LedgerChain
from ledger.chain.funding import FundingSettler
from ledger.chain.indexer import Indexer
from ledger.chain.leases import contract_address as leases_contract
from ledger.chain.settlement import FaultHook, Settler
from ledger.chain.slash import FraudSlasher
from ledger.core import db, secrets
from ledger.core.blob_holds import UploadLimits
from ledger.core.blobstore import BlobStore
from ledger.core.config import Settings
from ledger.core.leader import Leadership
from ledger.core.models import RoundState, Settlement, utcnow
from ledger.core.request_id import request_id
from ledger.core.retry import Backoff, describe
from ledger.core.round_book import RoundBook
from ledger.intake.accept import Intake
from ledger.intake.closing import RunClosures
from ledger.intake.membership import Membership
from ledger.judge.tensors import UsefulnessFn
from ledger.reads.metrics import Metrics
from ledger.reads.trees import EthTrees, RewardsTrees
from ledger.rounds.lifecycle import RoundKeeper
from ledger.rounds.retention import prune_rejections
from protocol.errors import SettlementError
from reference.settings import TrainingSettings

log = logging.getLogger(__name__)

PRUNE_EVERY_S = 60.0


class Ledger:
    def __init__(
        self,
        settings: Settings,
        *,
        chain: LedgerChain | None = None,
        engine: Engine | None = None,
        usefulness: UsefulnessFn | None = None,
        fault_hook: FaultHook | None = None,
    ) -> None:
        self.settings = settings
        secrets.register(settings)  # before anything can log the RPC URL
        self.engine = engine or db.make_engine(
            settings.database_url,
            threads=settings.api_threads,
            sqlite_synchronous=settings.sqlite_synchronous,
        )
        # the polled reads (ledger.api.fast_path): the same pool in autocommit, so a read is its
        # statements alone (no BEGIN and ROLLBACK round trips around them)
        self.read_engine = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        self.chain = chain or LedgerChain(
            settings.rpc_url, settings.deployment, settings.committer_key()
        )
        self.indexer = Indexer(
            self.engine,
            self.chain,
            chunk_blocks=settings.indexer_chunk_blocks,
            depth=max(0, settings.confirmations - 1),  # 1 confirmation = the head itself
        )
        self.round_book = RoundBook()  # one owner: intake, keeper and routes share it
        self.intake = Intake(self.engine, self.indexer, settings, self.round_book)
        self.membership = Membership(
            self.engine, self.indexer, join_window_s=settings.join_window_s
        )
        self.intake.membership = self.membership
        self.closures = RunClosures(self.engine)  # runs closed by their organiser
        self.intake.closures = self.closures
        self.blobs = BlobStore(
            settings.blob_dir,
            self.engine,
            max_bytes=settings.max_blob_bytes,
            limits=UploadLimits(
                quota_bytes=settings.blob_quota_bytes,
                per_node=settings.blob_uploads_per_node,
                total=settings.blob_uploads_total,
                anonymous_bytes=settings.blob_anonymous_bytes,
            ),
            upload_deadline_s=settings.blob_upload_deadline_s,
            min_free_bytes=settings.blob_min_free_bytes,
        )
        if usefulness is None and settings.usefulness_model:
            usefulness = self._trainer_usefulness()
        self.keeper = RoundKeeper(
            self.engine,
            self.round_book,
            self.indexer,
            self.blobs,
            settings,
            usefulness=usefulness,
            membership=self.membership,
        )
        self.settler = Settler(
            self.engine, self.chain, confirmations=settings.confirmations, fault_hook=fault_hook
        )
        self.funding = FundingSettler(self.engine, self.chain, self.settler)  # ETH roots
        self.eth_trees = EthTrees(enabled=self.funding.enabled)  # their trees, for requests
        self.slasher = self._slasher()  # failed audits -> slash proposals (None: no key)
        self.metrics = Metrics(self.intake.writer, self.indexer, self)
        self.keeper.observe_scoring = self.metrics.scoring_seconds.observe
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.leadership = Leadership(self.engine)
        self.leading = False
        self.step_errors: dict[str, str] = {}
        # the latest settlement's tree, its lease leaves folded in (GET /v1/rewards, /v1/leases)
        self.rewards_trees = RewardsTrees(leases_contract(self.chain.deployment))
        self.intents = Backoff("settlement intent of (run, round)")
        self._indexed_at = float("-inf")
        self._pruned_at = float("-inf")
        self._blobs_collected_at = time.monotonic()

    def _slasher(self) -> FraudSlasher | None:
        key = self.settings.slasher_key()
        if key is None:
            return None
        from eth_account import Account

        from protocol.chain import ChainClient

        client = ChainClient(self.settings.rpc_url, self.chain.deployment, Account.from_key(key))
        return FraudSlasher(self.engine, client, slash_bps=self.settings.slash_bps)

    def _trainer_usefulness(self) -> UsefulnessFn:
        from ledger.judge.usefulness import trainer_usefulness

        def config() -> TrainingSettings:
            cfg = self.indexer.snapshot.config
            if cfg is None:
                raise SettlementError("TrainingConfig not indexed yet")
            return cfg

        assert self.settings.usefulness_model is not None
        return trainer_usefulness(
            self.blobs,
            preset=self.settings.usefulness_model,
            corpus_dir=self.settings.usefulness_corpus,
            rows=self.settings.usefulness_rows,
            mixture_of=lambda: config().data_mixture_bps,
            outer_lr_of=lambda: config().outer_lr,
            inner_steps_of=lambda: config().inner_steps,
            data_root_of=lambda: bytes(config().data_root),
        )

    def prepare_database(self) -> None:
        if self.settings.auto_create_schema:
            db.create_all(self.engine)
        else:
            db.upgrade(self.settings.database_url)

    def start(self, *, background: bool | None = None) -> None:
        """Load state, catch up with the chain (the leader), and start the worker thread."""
        self.chain.check_chain_id()
        self.indexer.load()
        self.closures.load()
        with Session(self.engine) as session:
            unfinished = session.exec(
                select(RoundState.run_id, RoundState.round, RoundState.state).where(
                    RoundState.state != "final"
                )
            ).all()
        self.round_book.load(unfinished)
        self.refresh_chain_view()
        if background if background is not None else self.settings.run_background:
            self._thread = threading.Thread(target=self._run, name="ledger-worker", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.intake.close()
        self.leadership.release()
        self.engine.dispose()

    @property
    def last_error(self) -> str | None:
        problems = self.problems()
        return next(iter(problems.values()), None)

    def problems(self) -> dict[str, str]:
        """Every step, round or settlement failing right now, with its error."""
        return {
            **{f"step {name}": error for name, error in self.step_errors.items()},
            **self.keeper.backoff.report(),
            **self.intents.report(),
            **self.settler.backoff.report(),
        }

    def refresh_chain_view(self) -> None:
        """The leader indexes up to the chain head; a follower reloads what the leader stored."""
        self.leading = self.leadership.held()
        if self.leading:
            self.indexer.catch_up()
        else:
            self.indexer.load()

    def settle_now(self, run_id: str, round_: int, *, timeout_s: float = 120.0) -> Settlement:
        """Commit a recorded settlement now (the leader), or wait for the leader to commit it."""
        if self.leadership.held():
            return self.settler.drive(run_id, round_)
        deadline = time.monotonic() + timeout_s
        while True:
            with Session(self.engine, expire_on_commit=False) as session:
                row = session.exec(
                    select(Settlement).where(
                        Settlement.run_id == run_id, Settlement.round == round_
                    )
                ).one()
            if row.status in ("mined", "final", "conflict") or time.monotonic() > deadline:
                return row
            time.sleep(0.2)

    def tick(self) -> None:
        """One pass of the lifecycle; each step fails on its own (see the module docstring).

        Only the leader (:mod:`ledger.core.leader`) indexes, closes, scores, settles and prunes; a
        follower reloads the chain view the leader stored, to check attestations against it.
        """
        try:
            self.leading = self.leadership.held()
        except Exception as exc:
            self.leading = False
            self.step_errors["lead"] = describe(exc)
        else:
            self.step_errors.pop("lead", None)
        steps: tuple[tuple[str, Callable[[], object]], ...] = (
            ("index", self._index),
            ("close", self.keeper.close_due),
            ("score", self.keeper.score_ready),
            ("bisect", self.keeper.advance_bisections),  # failed segments to one step
            ("settle", self._settle),
            ("fund", self.funding.tick),  # ETH roots of funded runs (ledger/chain/funding.py)
            ("slash", self.slasher.tick if self.slasher else lambda: None),  # audit frauds
            ("checkpoint", lambda: db.checkpoint(self.engine)),
            ("prune", self._prune),
            ("blobs", self._collect_blobs),
        )
        if not self.leading:
            steps = (("follow", self._follow),)
        for stale in set(self.step_errors) - {name for name, _ in steps} - {"lead"}:
            del self.step_errors[stale]  # a step this worker no longer runs
        for name, step in steps:
            try:
                step()
            except Exception as exc:  # isolate: the next steps still run
                error = describe(exc)
                if self.step_errors.get(name) != error:
                    log.warning("lifecycle step %s failed (will retry): %s", name, error)
                self.step_errors[name] = error
            else:
                if self.step_errors.pop(name, None) is not None:
                    log.info("lifecycle step %s recovered", name)

    def _index(self) -> None:
        now = time.monotonic()
        if now - self._indexed_at < self.settings.indexer_poll_s:
            return
        self._indexed_at = now
        for _ in range(100):
            if self.indexer.step() == 0:
                break

    def _follow(self) -> None:
        now = time.monotonic()
        if now - self._indexed_at < self.settings.indexer_poll_s:
            return
        self._indexed_at = now
        self.indexer.load()
        self.closures.load()

    def _prune(self) -> None:
        now = time.monotonic()
        if now - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = now
        prune_rejections(self.engine, keep=self.settings.max_rejections_per_node)

    def _settle(self) -> None:
        self._record_missing_intents()
        self.settler.tick()
        with Session(self.engine) as session:
            oldest, sending = session.exec(
                select(
                    func.min(Settlement.created_at),
                    func.count(col(Settlement.tx_hash)),
                ).where(col(Settlement.status).in_(("intent", "signed", "sent")))
            ).one()
        age = (utcnow() - oldest).total_seconds() if oldest is not None else 0.0
        self.metrics.settlement_lag.set(age)
        self.metrics.pending_transactions.set(sending)

    def _collect_blobs(self) -> None:
        """Delete blobs no round needs, at most every tenth of the grace period (<= 5 min)."""
        now = time.monotonic()
        if now - self._blobs_collected_at < min(300.0, self.settings.blob_gc_grace_s / 10):
            return
        self._blobs_collected_at = now
        self.blobs.collect_garbage(grace_s=self.settings.blob_gc_grace_s)

    def _record_missing_intents(self) -> None:
        """Record the intent of every scored round without a settlement (each on its own)."""
        has_settlement = exists().where(
            col(Settlement.run_id) == col(RoundState.run_id),
            col(Settlement.round) == col(RoundState.round),
        )
        with Session(self.engine, expire_on_commit=False) as session:
            scored = session.exec(
                select(RoundState)
                .where(RoundState.state == "scored", ~has_settlement)
                .order_by(col(RoundState.id))
            ).all()
        for rnd in scored:
            key = (rnd.run_id, rnd.round)
            if not self.intents.due(key):
                continue
            try:
                self.settler.record_intent(rnd)
            except Exception as exc:
                self.intents.failed(key, exc)
            else:
                self.intents.succeeded(key)

    def _run(self) -> None:
        poll = min(self.settings.lifecycle_poll_s, self.settings.indexer_poll_s)
        ticks = 0
        while not self._stop.wait(poll):
            ticks += 1
            request_id.set(f"tick-{ticks}")
            try:
                self.tick()
            except Exception:  # tick isolates its steps; this is a last resort
                log.exception("lifecycle tick failed (will retry)")
