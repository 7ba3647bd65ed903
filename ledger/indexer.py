"""Chain indexer: follows StakeManager, ContributionLedger and TrainingConfig events.

It reads ``eth_getLogs`` in chunks from the deployment block, stores what it learns and its cursor
in one database transaction per chunk (so a restart resumes exactly), and keeps an in-memory
:class:`ChainSnapshot` the API answers from without an RPC call per request.

No archive node is needed: node records and the TrainingConfig touched by a chunk's events are read
at the latest block, never at a historical one. It stays ``depth`` blocks behind the head, and
remembers the hash of its cursor block: when a reorg replaced that block, it rewinds
``rewind_blocks``, forgets the commits it saw there and indexes them again.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlmodel import Session, select

from ledger.chain import ConfigView, LedgerChain
from ledger.models import ChainCommit, KeyValue, Node
from protocol.types import Address

log = logging.getLogger(__name__)

CURSOR_KEY = "indexer.cursor"
CONFIG_KEY = "indexer.config"
CURSOR_HASH_KEY = "indexer.cursor_hash"
_NODE_ARGS = ("node", "oldNode", "newNode")


@dataclass
class ChainSnapshot:
    """What the indexer knows, for lock-free reads by the API (replaced, never half-updated)."""

    nodes: dict[str, Node] = field(default_factory=dict)
    config: ConfigView | None = None
    last_round: dict[str, int] = field(default_factory=dict)
    checkpoints: dict[tuple[str, int], str] = field(default_factory=dict)
    indexed_block: int | None = None
    head: int | None = None

    def is_active(self, address: str) -> bool:
        node = self.nodes.get(address)
        if node is None or not node.registered or self.config is None:
            return False
        return int(node.staked) >= self.config.min_stake and int(node.staked) > 0


def _config_to_json(cfg: ConfigView) -> str:
    return json.dumps(cfg.__dict__)


class Indexer:
    def __init__(
        self,
        engine: Engine,
        chain: LedgerChain,
        *,
        chunk_blocks: int = 2000,
        depth: int = 0,
        rewind_blocks: int = 64,
    ) -> None:
        self.engine = engine
        self.chain = chain
        self.chunk_blocks = chunk_blocks
        self.depth = depth
        self.rewind_blocks = rewind_blocks
        self.snapshot = ChainSnapshot()
        self._lock = threading.Lock()

    def load(self) -> ChainSnapshot:
        """Rebuild the snapshot from the database (after a restart)."""
        snap = ChainSnapshot()
        with Session(self.engine) as session:
            for node in session.exec(select(Node)):
                snap.nodes[node.address] = node
            for commit in session.exec(select(ChainCommit)):
                snap.checkpoints[(commit.run_id, commit.round)] = commit.checkpoint
                prev = snap.last_round.get(commit.run_id, -1)
                snap.last_round[commit.run_id] = max(prev, commit.round)
            cursor = session.get(KeyValue, CURSOR_KEY)
            snap.indexed_block = int(cursor.value) if cursor else None
            cfg = session.get(KeyValue, CONFIG_KEY)
            if cfg is not None:
                data = json.loads(cfg.value)
                data["data_mixture"] = tuple(data.get("data_mixture", (10_000,)))
                snap.config = ConfigView(**data)
        snap.head = self.snapshot.head
        self.snapshot = snap
        return snap

    def step(self) -> int:
        """Index the next chunk of blocks; return how many blocks were indexed (0 = caught up)."""
        with self._lock:
            head = self.chain.block_number()
            refresh: set[str] = self._rewind_if_reorged()
            snap = self.snapshot
            start = (
                snap.indexed_block + 1
                if snap.indexed_block is not None
                else self.chain.deployment_block
            )
            safe = head - self.depth
            if start > safe:
                self.snapshot.head = head
                return 0
            end = min(safe, start + self.chunk_blocks - 1)
            events = self.chain.logs(start, end)
            end_hash = self.chain.block_hash(end)
            config_changed = snap.config is None
            commits: list[ChainCommit] = []
            for ev in events:
                if ev.contract == "StakeManager":
                    refresh.update(str(ev.args[k]) for k in _NODE_ARGS if k in ev.args)
                elif ev.contract == "TrainingConfig":
                    config_changed = True
                elif ev.name == "RoundCommitted":
                    commits.append(
                        ChainCommit(
                            run_id="0x" + bytes(ev.args["runId"]).hex(),
                            round=int(ev.args["round"]),
                            rewards_root="0x" + bytes(ev.args["rewardsRoot"]).hex(),
                            checkpoint="0x" + bytes(ev.args["checkpointHash"]).hex(),
                            total_work=str(int(ev.args["totalWork"])),
                            attestations_root="0x" + bytes(ev.args["attestationsRoot"]).hex(),
                            block_number=ev.block_number,
                            tx_hash=ev.tx_hash,
                        )
                    )
            client = self.chain.client
            # state at the latest block: correct now, and no archive node needed
            records = [client.node_info(Address(addr)) for addr in sorted(refresh)]
            config = ConfigView.from_view(client.training_config()) if config_changed else None
            with Session(self.engine, expire_on_commit=False) as session:
                for rec in records:
                    row = session.get(Node, rec.node) or Node(
                        address=rec.node, operator="", payout="", staked="0", updated_block=end
                    )
                    row.operator, row.payout = rec.operator, rec.payout
                    row.staked, row.unbonding = str(rec.staked), str(rec.unbonding)
                    row.registered, row.updated_block = rec.registered, end
                    session.add(row)
                for commit in commits:
                    exists = session.exec(
                        select(ChainCommit).where(
                            ChainCommit.run_id == commit.run_id, ChainCommit.round == commit.round
                        )
                    ).first()
                    if exists is None:
                        session.add(commit)
                if config is not None:
                    session.merge(KeyValue(key=CONFIG_KEY, value=_config_to_json(config)))
                session.merge(KeyValue(key=CURSOR_KEY, value=str(end)))
                if end_hash is not None:
                    session.merge(KeyValue(key=CURSOR_HASH_KEY, value=end_hash))
                session.commit()
                for rec_row in (session.get(Node, r.node) for r in records):
                    if rec_row is not None:
                        session.expunge(rec_row)
                        snap_nodes = dict(self.snapshot.nodes)
                        snap_nodes[rec_row.address] = rec_row
                        self.snapshot.nodes = snap_nodes
            for commit in commits:
                self.snapshot.checkpoints[(commit.run_id, commit.round)] = commit.checkpoint
                prev = self.snapshot.last_round.get(commit.run_id, -1)
                self.snapshot.last_round[commit.run_id] = max(prev, commit.round)
            if config is not None:
                self.snapshot.config = config
            self.snapshot.indexed_block = end
            self.snapshot.head = head
            if events:
                log.info("indexed blocks %d-%d: %d events", start, end, len(events))
            return end - start + 1

    def _rewind_if_reorged(self) -> set[str]:
        """If the cursor block is no longer canonical, rewind; return the nodes to refresh."""
        cursor = self.snapshot.indexed_block
        if cursor is None:
            return set()
        with Session(self.engine) as session:
            stored = session.get(KeyValue, CURSOR_HASH_KEY)
            if stored is None or self.chain.block_hash(cursor) == stored.value:
                return set()
            back = max(self.chain.deployment_block - 1, cursor - self.rewind_blocks)
            log.warning(
                "reorg: block %d is no longer %s; re-indexing from block %d",
                cursor, stored.value, back + 1,
            )  # fmt: skip
            for commit in session.exec(select(ChainCommit).where(ChainCommit.block_number > back)):
                session.delete(commit)
            touched = {
                n.address for n in session.exec(select(Node).where(Node.updated_block > back))
            }
            session.merge(KeyValue(key=CURSOR_KEY, value=str(back)))
            session.delete(stored)
            session.commit()
        self.load()
        return touched

    def catch_up(self, max_steps: int = 10_000) -> None:
        """Index until the chain head (used at start and by tests)."""
        for _ in range(max_steps):
            if self.step() == 0:
                return
