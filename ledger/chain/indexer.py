"""Chain indexer: follows StakeManager, ContributionLedger and TrainingConfig events.

Nodes are followed by StakeManager's stable node id, not only by key: every key row carries its
node id, a rotation's new key joins its node's id and the old key stays (retired) under it, and
the events that name only a node id (SlashProposed, Slashed) or a proposal (SlashVetoed) refresh
every key of that node. Each committed root carries its finality: ``finalized_at`` (the end of
its dispute window, read from ``rootInfo``) and, once a RootRevoked event is seen, the block that
revoked it (a revoked root never pays).

RunFunding and CodeRegistry events, when the deployment has them, go to ``funding_event`` rows
(ledger/chain/funding_index.py) in the same transaction as the cursor, and follow the same rewind.

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
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session, col, select
from web3.exceptions import BlockNotFound

from ledger.chain import funding_index
from ledger.chain.client import LedgerChain
from ledger.core.models import ChainCommit, KeyValue, Node
from protocol.errors import ConfigError
from protocol.types import Address, Bytes32
from reference.settings import TrainingSettings

log = logging.getLogger(__name__)

CURSOR_KEY = "indexer.cursor"
CONFIG_KEY = "indexer.config"
CONFIGS_KEY = "indexer.configs"  # every version seen: a round is judged under the one it signs
CURSOR_HASH_KEY = "indexer.cursor_hash"
CURSOR_TIME_KEY = "indexer.cursor_time"  # the cursor block's timestamp (vesting "now")
_NODE_ARGS = ("node", "oldNode", "newNode")

ROOT_STATES = ("unknown", "pending", "finalized", "revoked")


@dataclass(frozen=True)
class RootFinality:
    """A committed rewards root's dispute window and revocation, as indexed."""

    finalized_at: int | None
    revoked: bool

    def state(self, now: int) -> str:
        """'revoked', 'pending' (in its dispute window: revocable, not claimable) or
        'finalized' (claimable)."""
        if self.revoked:
            return "revoked"
        if self.finalized_at is None or now < self.finalized_at:
            return "pending"
        return "finalized"


@dataclass
class ChainSnapshot:
    """What the indexer knows, for lock-free reads by the API (replaced, never half-updated)."""

    nodes: dict[str, Node] = field(default_factory=dict)
    config: TrainingSettings | None = None
    configs: dict[int, TrainingSettings] = field(default_factory=dict)
    """Every TrainingConfig version indexed, by version (``config`` among them), each read while
    it was the chain's: the judge holds a round to the version its members signed."""
    last_round: dict[str, int] = field(default_factory=dict)
    checkpoints: dict[tuple[str, int], str] = field(default_factory=dict)
    indexed_block: int | None = None
    head: int | None = None
    roots: dict[str, RootFinality] = field(default_factory=dict)
    chain_time: int | None = None  # the indexed cursor block's timestamp

    def node_id_of(self, address: str) -> int | None:
        node = self.nodes.get(address)
        return node.node_id if node is not None and node.node_id else None

    def keys_of(self, address: str) -> list[str]:
        """Every key the node of ``address`` has had (itself included, retired ones too)."""
        node_id = self.node_id_of(address)
        if node_id is None:
            return [address]
        return sorted(a for a, n in self.nodes.items() if n.node_id == node_id)

    def now(self) -> int:
        """A lower bound on the next block's timestamp: the indexed chain time or the wall clock,
        whichever is later (a devnet mines on demand; its clock may run ahead)."""
        return max(self.chain_time or 0, int(time.time()))

    def root_state(self, root: str | None) -> tuple[str, int | None]:
        """(state, claimable-from unix seconds) of a rewards root: see ROOT_STATES."""
        finality = self.roots.get(root or "")
        if finality is None:
            return "unknown", None
        return finality.state(self.now()), finality.finalized_at

    def is_active(self, address: str) -> bool:
        node = self.nodes.get(address)
        if node is None or not node.registered or self.config is None:
            return False
        return int(node.staked) >= self.config.min_stake and int(node.staked) > 0


def _finality(commit: ChainCommit) -> RootFinality:
    return RootFinality(commit.finalized_at, commit.revoked_block is not None)


def _config_to_json(cfg: TrainingSettings) -> str:
    return json.dumps(cfg.to_json())


def _configs_to_json(configs: dict[int, TrainingSettings]) -> str:
    return json.dumps([c.to_json() for _, c in sorted(configs.items())])


def _configs_from_json(text: str) -> dict[int, TrainingSettings]:
    """The stored versions; those in a form this ledger no longer reads are left out."""
    read = (_settings_of(item) for item in json.loads(text))
    return {cfg.version: cfg for cfg in read if cfg is not None}


def _config_from_json(text: str) -> TrainingSettings | None:
    """The stored settings; None for a form this ledger no longer reads (the next step then
    reads them from the chain again)."""
    return _settings_of(json.loads(text))


def _settings_of(data: Any) -> TrainingSettings | None:
    try:
        return TrainingSettings.from_json(data)
    except ConfigError as exc:
        log.info("stored training settings not read (%s): reading them from the chain", exc)
        return None


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
                snap.roots[commit.rewards_root] = _finality(commit)
            cursor = session.get(KeyValue, CURSOR_KEY)
            snap.indexed_block = int(cursor.value) if cursor else None
            cfg = session.get(KeyValue, CONFIG_KEY)
            if cfg is not None:
                snap.config = _config_from_json(cfg.value)
            stored = session.get(KeyValue, CONFIGS_KEY)
            if stored is not None:
                snap.configs = _configs_from_json(stored.value)
            if snap.config is not None:
                snap.configs.setdefault(snap.config.version, snap.config)
        snap.head = self.snapshot.head
        snap.chain_time = self.snapshot.chain_time
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
            revoked: dict[str, int] = {}
            node_ids: set[int] = set()
            # keys indexed before node ids were (migration 0006): read once
            refresh.update(a for a, n in snap.nodes.items() if n.node_id is None)
            funding = [ev for ev in events if funding_index.is_funding(ev)]
            times = {b: self.chain.block_time(b) for b in {ev.block_number for ev in funding}}
            for ev in events:
                if funding_index.is_funding(ev):
                    continue
                if ev.contract == "StakeManager":
                    refresh.update(str(ev.args[k]) for k in _NODE_ARGS if k in ev.args)
                    if "nodeId" in ev.args:
                        node_ids.add(int(ev.args["nodeId"]))
                    elif ev.name == "SlashVetoed":
                        node_ids.add(self._slashed_node(int(ev.args["proposalId"])))
                elif ev.contract == "TrainingConfig":
                    config_changed = True
                elif ev.name == "RootRevoked":
                    revoked.setdefault("0x" + bytes(ev.args["root"]).hex(), ev.block_number)
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
            refresh.update(a for a, n in snap.nodes.items() if n.node_id in node_ids)
            # state at the latest block: correct now, and no archive node needed
            records = [client.node_info(Address(addr)) for addr in sorted(refresh)]
            ids = {r.node: client.stake_manager.node_id_of(r.node) for r in records}
            for commit in commits:
                status = client.root_status(Bytes32(bytes.fromhex(commit.rewards_root[2:])))
                commit.finalized_at = status.finalized_at
            chain_time = self._block_time(end)
            config = TrainingSettings.read(client) if config_changed else None
            # every version read is kept (the judge holds a round to the one it signed). State
            # is read at the latest block only, so no archive node is needed: a version that a
            # second vote replaced within one indexing step is never read (a round signed under
            # it is judged under the current settings: ledger.judge.claims.round_config)
            configs = snap.configs if config is None else {**snap.configs, config.version: config}
            with Session(self.engine, expire_on_commit=False) as session:
                for rec in records:
                    row = session.get(Node, rec.node) or Node(
                        address=rec.node, operator="", payout="", staked="0", updated_block=end
                    )
                    row.operator, row.payout = rec.operator, rec.payout
                    row.staked, row.unbonding = str(rec.staked), str(rec.unbonding)
                    row.registered, row.updated_block = rec.registered, end
                    row.node_id = ids[rec.node]
                    session.add(row)
                for commit in commits:
                    exists = session.exec(
                        select(ChainCommit).where(
                            ChainCommit.run_id == commit.run_id, ChainCommit.round == commit.round
                        )
                    ).first()
                    if exists is None:
                        session.add(commit)
                session.flush()
                for root, block in revoked.items():
                    for hit in session.exec(
                        select(ChainCommit).where(ChainCommit.rewards_root == root)
                    ):
                        hit.revoked_block = block
                        session.add(hit)
                if config is not None:
                    session.merge(KeyValue(key=CONFIG_KEY, value=_config_to_json(config)))
                    session.merge(KeyValue(key=CONFIGS_KEY, value=_configs_to_json(configs)))
                funding_index.record(session, funding, times)
                if chain_time is not None:
                    session.merge(KeyValue(key=CURSOR_TIME_KEY, value=str(chain_time)))
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
            roots = dict(self.snapshot.roots)
            for commit in commits:
                self.snapshot.checkpoints[(commit.run_id, commit.round)] = commit.checkpoint
                prev = self.snapshot.last_round.get(commit.run_id, -1)
                self.snapshot.last_round[commit.run_id] = max(prev, commit.round)
                roots.setdefault(commit.rewards_root, _finality(commit))
            for root in revoked:
                known = roots.get(root)
                roots[root] = RootFinality(known.finalized_at if known else None, True)
            self.snapshot.roots = roots
            if chain_time is not None:
                self.snapshot.chain_time = chain_time
            if config is not None:
                self.snapshot.configs = configs
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
            for commit in session.exec(
                select(ChainCommit).where(col(ChainCommit.revoked_block) > back)
            ):
                commit.revoked_block = None  # the revocation was rewound: seen again if replayed
                session.add(commit)
            funding_index.rewind(session, back)
            touched = {
                n.address for n in session.exec(select(Node).where(Node.updated_block > back))
            }
            session.merge(KeyValue(key=CURSOR_KEY, value=str(back)))
            session.delete(stored)
            session.commit()
        self.load()
        return touched

    def _slashed_node(self, proposal_id: int) -> int:
        """The node id a slash proposal names (SlashVetoed carries only the proposal id)."""
        return self.chain.client.stake_manager.slash_proposal(proposal_id).node_id

    def _block_time(self, number: int) -> int | None:
        eth = self.chain.client.w3.eth
        try:
            block = self.chain.client.rpc(lambda: eth.get_block(number), "eth_getBlockByNumber")
        except BlockNotFound:
            return None
        return int(block["timestamp"]) if block else None

    def catch_up(self, max_steps: int = 10_000) -> None:
        """Index until the chain head (used at start and by tests)."""
        for _ in range(max_steps):
            if self.step() == 0:
                return
