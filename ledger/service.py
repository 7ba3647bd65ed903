"""The ledger's parts wired together, and the background worker that drives them.

One :class:`Ledger` per process: the database engine, the chain door, the indexer (and its
in-memory snapshot), intake, the blob store, the round keeper and the settler. The worker thread
runs ``index -> close -> score -> settle`` every ``lifecycle_poll_s``; a failing step is logged
and retried on the next tick, so the API keeps serving.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from ledger import db
from ledger.blobstore import BlobStore
from ledger.chain import ConfigView, LedgerChain
from ledger.core.config import Settings
from ledger.indexer import Indexer
from ledger.intake import Intake
from ledger.models import RoundState, Settlement
from ledger.quality import UsefulnessFn
from ledger.rounds import RoundKeeper
from ledger.settlement import FaultHook, Settler
from protocol.errors import ColocoError, SettlementError

log = logging.getLogger(__name__)


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
        self.engine = engine or db.make_engine(settings.database_url)
        self.chain = chain or LedgerChain(
            settings.rpc_url, settings.deployment, settings.committer_key()
        )
        self.indexer = Indexer(
            self.engine,
            self.chain,
            chunk_blocks=settings.indexer_chunk_blocks,
            depth=max(0, settings.confirmations - 1),  # 1 confirmation = the head itself
        )
        self.intake = Intake(self.engine, self.indexer, settings)
        self.blobs = BlobStore(settings.blob_dir, self.engine, max_bytes=settings.max_blob_bytes)
        if usefulness is None and settings.usefulness_model:
            usefulness = self._trainer_usefulness()
        self.keeper = RoundKeeper(
            self.engine, self.intake, self.indexer, self.blobs, settings, usefulness=usefulness
        )
        self.settler = Settler(
            self.engine, self.chain, confirmations=settings.confirmations, fault_hook=fault_hook
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self._indexed_at = float("-inf")

    def _trainer_usefulness(self) -> UsefulnessFn:
        from ledger.usefulness import trainer_usefulness

        def config() -> ConfigView:
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
            mixture_of=lambda: config().data_mixture,
            outer_lr_of=lambda: config().outer_lr_e6 / 1e6,
        )

    def prepare_database(self) -> None:
        if self.settings.auto_create_schema:
            db.create_all(self.engine)
        else:
            db.upgrade(self.settings.database_url)

    def start(self, *, background: bool | None = None) -> None:
        """Load state, catch up with the chain, and start the worker thread."""
        self.chain.check_chain_id()
        self.indexer.load()
        with Session(self.engine) as session:
            for rnd in session.exec(select(RoundState)):
                self.intake.round_states[(rnd.run_id, rnd.round)] = rnd.state
        self.indexer.catch_up()
        if background if background is not None else self.settings.run_background:
            self._thread = threading.Thread(target=self._run, name="ledger-worker", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.engine.dispose()

    def tick(self) -> None:
        """One pass of the lifecycle: index, close, score, record intents, settle."""
        now = time.monotonic()
        if now - self._indexed_at >= self.settings.indexer_poll_s:
            self._indexed_at = now
            for _ in range(100):
                if self.indexer.step() == 0:
                    break
        self.keeper.close_due()
        for rnd in self.keeper.score_ready():
            if rnd.state == "scored":
                self.settler.record_intent(rnd)
        self._record_missing_intents()
        self.settler.tick()
        db.checkpoint(self.engine)

    def _record_missing_intents(self) -> None:
        with Session(self.engine, expire_on_commit=False) as session:
            scored = session.exec(
                select(RoundState).where(RoundState.state == "scored").order_by(col(RoundState.id))
            ).all()
            done = {(s.run_id, s.round) for s in session.exec(select(Settlement)).all()}
        for rnd in scored:
            if (rnd.run_id, rnd.round) not in done:
                self.settler.record_intent(rnd)

    def _run(self) -> None:
        poll = min(self.settings.lifecycle_poll_s, self.settings.indexer_poll_s)
        while not self._stop.wait(poll):
            try:
                self.tick()
                self.last_error = None
            except ColocoError as exc:
                self.last_error = f"{exc.code}: {exc.message}"
                log.warning("lifecycle step failed (will retry): %s", self.last_error)
            except Exception as exc:  # keep serving; the next tick retries from the database
                self.last_error = repr(exc)
                log.exception("lifecycle step failed (will retry)")
