"""The node operator's loop: recover, then per round join, read config, train, sync, attest, save.

:class:`NodeRunner` is the pure-Python entry point (tests, the demo and ``coloco node run`` all
drive it). Each round reads as verbs::

    members = join(r)            # signed joins, signed round-open (elastic membership)
    config  = read_config(r)     # TrainingConfig read by this node at the round's agreed block
    local   = train_local(r)     # H inner AdamW steps on this node's shard
    outcome = synchronize(local) # average + outer Nesterov step, re-forming the group on failure
    save / publish / attest      # checkpoint on disk, served to peers, signed attestation

:meth:`NodeRunner.run_round` is that round, written once; when its all-reduce and outer step run
is its schedule's (:mod:`trainer.round.schedule`): the one-round delayed outer step
(:class:`trainer.round.overlap.Overlap`, ``NodeSettings.overlap``, ``--overlap``), or
:class:`~trainer.round.schedule.Lockstep` (the default; a node of several local ranks and a
time-boxed node always).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch

from protocol.eip712 import Eip712Domain, to_checksum_address
from protocol.errors import (
    CollectiveError,
    ConfigError,
    ForgedPacketError,
    LedgerError,
    LedgerUnavailableError,
    TrainerError,
)
from protocol.types import Address
from reference.checkpoint import CheckpointDir, RoundCheckpoint
from reference.data import EVAL_ROWS, EVAL_SEED, Corpus, ShardSpec, check_data
from reference.inner import InnerConfig, StepInfo, precision
from reference.model import GPT, GPTConfig
from trainer.network.coordination.heartbeat import Heartbeat, Liveness, StalledError, watching
from trainer.network.coordination.ledger_view import LedgerMembers
from trainer.network.coordination.registry import AnyKeyRegistry, ChainRegistry, Registry
from trainer.network.group import RoundGroup
from trainer.network.members import Members
from trainer.network.membership import MembershipConfig, Rendezvous
from trainer.network.peer_checkpoint import CHUNK_BYTES, CheckpointServer, Manifest
from trainer.round import timebox
from trainer.round.agreement import ConfigAgreement
from trainer.round.attest import Attester, WorkRecord
from trainer.round.boundaries import (
    KEEP_ROUNDS,
    BoundaryServer,
    BoundaryStore,
    answer_requests,
    linger,
    recompute,
)
from trainer.round.bounded import Bounded
from trainer.round.commits import PacketCheck, post_commit
from trainer.round.diloco import DiLoCo, LocalWork, RoundOutcome
from trainer.round.hold import hold_at_boundary, holds
from trainer.round.journal import Journal
from trainer.round.overlap import Overlap
from trainer.round.ranks import RankedDiLoCo, RankPool
from trainer.round.recovery import Recovery
from trainer.round.residual import Residuals
from trainer.round.runconfig import ConfigSource, RunConfig
from trainer.round.schedule import (
    LeftOut,
    Lockstep,
    RoundLost,
    RoundReport,
    RoundWork,
    SatOut,
    Schedule,
)
from trainer.round.strategy import Strategy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeSettings:
    run_id: bytes
    model: GPTConfig
    rendezvous_host: str = "127.0.0.1"
    rendezvous_port: int = 29400
    host_rendezvous: bool = False
    own_endpoint: str | None = None
    """HOST:PORT where this node hosts the rendezvous if it becomes the successor."""
    serve_host: str = "127.0.0.1"
    serve_port: int = 0
    """Where this node serves its checkpoints to joiners (trainer.network.peer_checkpoint); 0: any
    port."""
    checkpoint_chunk_bytes: int = CHUNK_BYTES
    membership: MembershipConfig = field(default_factory=MembershipConfig)
    seed: int = 0
    device: str = "cpu"
    bf16: bool = False
    """bf16 autocast on a GPU instead of the pinned fp32 the audit replays (its rounds fail the
    audit; reference.inner.precision)."""
    data_path: str | None = None
    checkpoint_dir: Path | None = None
    max_rounds: int | None = None
    leave_after_round: int | None = None
    eval_rows: int = EVAL_ROWS  # 0: no eval; the default is the one everyone reports
    max_collective_retries: int = 2
    hold_file: Path | None = None
    """While this file exists the node does not start a round (trainer.round.hold); it keeps its
    state and heartbeats and starts the round once the file is gone."""
    overlap: bool = False
    """One-round delayed outer step (trainer.round.overlap, ``--overlap``): round r's all-reduce
    runs in the background during round r+1's compute; round r's attestation follows at the end
    of round r+1 (the ledger audits such a round from its committed origin,
    ledger.judge.origin_check). It costs x1.085 in loss; False (the default): the bounded overlap
    below, or lockstep. When set it takes precedence over ``bounded_overlap``; a node of several
    local ranks and a time-boxed node run lockstep whatever this says (:meth:`schedule`)."""
    bounded_overlap: bool = True
    """The bounded overlap (trainer.round.bounded; the default, ``--no-bounded-overlap``:
    lockstep): round r's exchange runs during round r+1's first k inner steps (k:
    TrainingConfig.traceInterval) and lands at its first boundary; x1.006 in loss against
    lockstep where the one-round delay (``overlap``, which takes precedence) costs x1.085
    (docs/trainer.md, "The bounded overlap"). A node of several local ranks and a time-boxed
    node run lockstep whatever this says."""
    audit_linger_s: float = 0.0
    """After its last round, answer the ledger's boundary requests (its segment audit) until the
    ledger has judged that round or this many seconds pass (trainer.round.boundaries.linger);
    0: leave at once (an audit of the last round then finds its boundaries withheld)."""
    time_box: bool = False
    """Heterogeneous nodes (trainer.round.timebox): run only the inner steps that fit H + 1 steps
    at the fastest member's pace of the round before, and declare them (weighted and paid by
    tokens)."""
    local_ranks: int = 1
    """Local ranks (processes) of this node (trainer.round.ranks): FSDP2 shards the model over
    them, each holds a chunk of the outer state; 1: the node trains in its own process."""

    def __post_init__(self) -> None:
        self.precision()  # --bf16 off a GPU fails at start, not in round 1
        self.check_ranks()

    def check_ranks(self) -> None:
        """What a node of several local ranks does not do yet fails at start, named."""
        n = self.local_ranks
        if n < 1:
            raise ConfigError(f"--local-ranks {n}: a node runs at least 1 rank")
        if n == 1:
            return
        if self.time_box:
            raise ConfigError(
                f"--local-ranks {n} with --time-box: not built for a node of several ranks; "
                "drop --time-box or run one rank"
            )
        if torch.device(self.device).type != "cpu":
            raise ConfigError(
                f"--local-ranks {n} on --device {self.device}: the node's ranks run on CPU/gloo "
                "here (the NCCL path is bench.gpu_node's); use --device cpu or one rank"
            )

    def schedule(self) -> str:
        """The schedule of this node's outer step: "overlap" (``overlap``, asked for), else
        "bounded" (``bounded_overlap``, the default), else "lockstep", which a node of several
        local ranks (trainer.round.ranks trains whole rounds from the base) and a time-boxed
        node (its budget is agreed from the members' paces at the round's start) fall back to,
        said once at INFO."""
        asked = "overlap" if self.overlap else "bounded" if self.bounded_overlap else "lockstep"
        if asked == "lockstep":
            return asked
        why = ("a node of several local ranks" if self.local_ranks > 1
               else "a time-boxed node" if self.time_box else None)  # fmt: skip
        if why is None:
            return asked
        flag = "--overlap" if self.overlap else "the default; --no-bounded-overlap"
        log.info("%s runs lockstep: the %s schedule (%s) is not built for it", why, asked, flag)
        return "lockstep"

    def overlapped(self) -> bool:
        """Whether this node's exchange overlaps its compute (:meth:`schedule` not lockstep)."""
        return self.schedule() != "lockstep"

    def precision(self) -> AbstractContextManager[None]:
        """The precision this node trains its inner steps in (reference.inner.precision):
        pinned fp32 on a CPU and by default on a GPU, bf16 autocast only with ``bf16``."""
        return precision(torch.device(self.device), bf16=self.bf16)


ProgressFn = Callable[[int, StepInfo], None]


def offline_domain(run_id: bytes) -> Eip712Domain:
    """The coordination domain of a run without a chain (the same on every node of the run)."""
    contract = Address(to_checksum_address(run_id[:20]))
    return Eip712Domain(chain_id=31337, verifying_contract=contract)


class NodeRunner:
    """One node. ``run()`` returns the reports of the rounds it worked."""

    def __init__(
        self,
        settings: NodeSettings,
        attester: Attester,
        config_source: ConfigSource,
        *,
        corpus: Corpus | None = None,
        recovery: Recovery | None = None,
        on_step: ProgressFn | None = None,
        on_round: Callable[[RoundReport], None] | None = None,
        registry: Registry | None = None,
        strategy: Strategy | None = None,
    ) -> None:
        self.s = settings
        self.strategy = strategy or Strategy()  # honest; the red team plugs cheaters in here
        self.attester = attester
        self.address = attester.address
        self.config_source = config_source
        self.corpus = corpus or Corpus.load(settings.data_path)
        self.device = torch.device(settings.device)
        self.on_step = on_step
        self.on_round = on_round
        self.recovery = recovery or Recovery(settings.run_id, settings.model, settings.seed)
        if attester.journal is None and attester.ledger is not None and settings.checkpoint_dir:
            attester.use_journal(Journal(settings.checkpoint_dir))  # unsent rounds survive it
        chain = self.recovery.chain
        if registry is None:
            registry = ChainRegistry(chain) if chain is not None else AnyKeyRegistry()
        run = settings.run_id
        domain = chain.attestation_domain() if chain is not None else offline_domain(run)
        self.rdv = Rendezvous(
            settings.rendezvous_host, settings.rendezvous_port,
            key=attester.key, domain=domain, run_id=settings.run_id, registry=registry,
            cfg=settings.membership, is_host=settings.host_rendezvous,
            own_endpoint=settings.own_endpoint, head=config_source.head,
        )  # fmt: skip
        ms = settings.membership
        self.round_now = 0
        self.heartbeat = Heartbeat(
            self.rdv.board, lambda: self.rdv.store.endpoint, interval_s=ms.heartbeat_interval_s,
            round=lambda: self.round_now, probe=lambda: self.rdv.store.check(["rendezvous/ready"]),
        )  # fmt: skip
        self.liveness = Liveness(self.rdv.board, ms.heartbeat_timeout_s)
        self.rdv.liveness = self.liveness  # a silent member is not waited for at a round boundary
        if attester.ledger is not None:  # the member lists close from the joins it accepted
            self.rdv.ledger = LedgerMembers(attester.ledger, settings.run_id)
        self.stalled: list[tuple[int, tuple[str, ...]]] = []
        """(round, members) dropped from a collective because their heartbeat stopped."""
        self.forged: list[tuple[int, tuple[str, ...]]] = []
        """(round, members) dropped from a collective because their packet was not the one they
        committed to."""
        self.held: dict[int, bytes] = {}
        """The weights hash this node held after each of its last rounds (resync compares)."""
        self.resyncs: list[int] = []
        """Rounds whose committed state this node adopted from the ledger (:meth:`resync`)."""
        self.commits: dict[int, PacketCheck] = {}
        """Per round in flight, the members' signed packet commitments this node checked."""
        self.agreement = ConfigAgreement(self.rdv, config_source,
                                         settings.membership.config_wait_s)  # fmt: skip
        self.disk = CheckpointDir(settings.checkpoint_dir) if settings.checkpoint_dir else None
        self.residuals = Residuals(settings.checkpoint_dir)
        """The sparse format's error feedback, by round (trainer.round.residual)."""
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        work_dir = settings.checkpoint_dir
        if work_dir is None:  # its signed traceRoot must be servable: the audit asks for them
            self._scratch = tempfile.TemporaryDirectory(prefix="coloco-boundaries-")
            work_dir = Path(self._scratch.name)
        self.boundaries: BoundaryStore | None = BoundaryStore(work_dir)
        """The rounds' boundary states, kept for the audit window (trainer.round.boundaries): in
        the checkpoint folder, else a scratch folder removed when the node stops."""
        self.round_inputs: dict[int, tuple[torch.Tensor, InnerConfig]] = {}
        """The rows and inner config each of the last rounds trained with (the audit window's):
        what :meth:`advance` re-runs to answer a bisection's probe."""
        self.server = CheckpointServer(settings.serve_host, settings.serve_port)
        self.rdv.checkpoints.serving = self.server.endpoint  # its joins announce it from round 1
        self.ranks = None if settings.local_ranks == 1 else \
            RankPool(settings.model, settings.seed, settings.local_ranks)  # fmt: skip
        """The node's local ranks (trainer.round.ranks); None: it trains in this process."""
        self.model = None if self.ranks else GPT(settings.model, seed=settings.seed).to(self.device)
        self.diloco: DiLoCo | None = None
        self._upload_due: RoundCheckpoint | None = None
        self._untraced: dict[int, tuple[LocalWork, dict[str, torch.Tensor] | None]] = {}
        """Rounds trained whose trace the store has not recorded yet (:meth:`finish_trace`)."""
        self.state_round = -1
        self._last_members: tuple[str, ...] = ()
        self._group: RoundGroup | None = None
        self.groups_formed = 0
        kinds: dict[str, Callable[[NodeRunner], Schedule]] = {
            "bounded": Bounded, "overlap": Overlap, "lockstep": Lockstep,
        }  # fmt: skip
        self.schedule = kinds[settings.schedule()](self)
        self._landed_early: list[RoundReport] = []  # landed while a join waited for the ledger
        attester.on_outage = self._land_in_flight
        self.eval_rows = (
            self.corpus.eval_rows(settings.model.seq_len, settings.eval_rows, seed=EVAL_SEED)
            if settings.eval_rows
            else None
        )

    # --- verbs ------------------------------------------------------------------------------

    def adopt(self, ckpt: RoundCheckpoint) -> None:
        """Hold ``ckpt``'s state (the start, a rejoin's catch-up, a checkpoint load, a resync):
        a new DiLoCo, so a carried inner AdamW state starts fresh (a checkpoint holds the outer
        state only; the moments of rounds this node did not train are nobody's)."""
        if self.ranks is not None:
            self.diloco = RankedDiLoCo(self.ranks, ckpt.to_state())
        else:
            assert self.model is not None
            self.diloco = DiLoCo(self.model, ckpt.to_state())
        self.residuals.adopt(ckpt.round)  # its own sparse residual, or zero (round.residual)
        self.state_round = ckpt.round
        self.held[ckpt.round] = ckpt.weights_hash
        log.info("%s holds the state after round %d (0x%s..)", self.address, ckpt.round,
                 ckpt.weights_hash.hex()[:12])  # fmt: skip

    def join(self, r: int) -> Members:
        return self.rdv.join(r)

    def read_config(self, members: Members) -> tuple[RunConfig, Members]:
        """This node's own read of TrainingConfig at the round's block, once the members agree.

        Members whose read differs (or whose chain is behind) drop out: the round re-forms with
        the agreeing majority; a node outside any majority sits the round out (``SatOut``).
        """
        r = members.round
        while True:
            verdict = self.agreement.settle(members)
            if verdict.config is None:
                raise SatOut(r)
            if verdict.agree == set(members.addresses):
                return verdict.config, members
            window = 2 * self.s.membership.config_wait_s + 2.0
            members = self.rdv.join(r, members.attempt + 1, window_s=0.0, timeout_s=window,
                                    expect=set(verdict.agree))  # fmt: skip
            if self.address not in members.addresses:
                raise SatOut(r)

    def train_local(
        self,
        r: int,
        config: RunConfig,
        members: Members | None = None,
        start: torch.Tensor | None = None,
        landing: Callable[[], None] | None = None,
    ) -> tuple[ShardSpec, LocalWork]:
        """This node's inner phase of round ``r``. With ``time_box`` on and the round's
        ``members`` given, only the steps that fit the budget agreed from the members' paces of
        round r - 1 (trainer.round.timebox), and this node's pace posted for round r + 1's box.
        ``start``, ``landing``: the schedule's (trainer.round.diloco.DiLoCo.train_local)."""
        assert self.diloco is not None
        self.check_data(config)  # a governed change of the data lands between rounds
        inner = config.settings.inner
        spec = ShardSpec.for_node(self.s.run_id, r, self.address,
                                  inner.tokens(self.s.model.seq_len), config.mixture)  # fmt: skip
        rows = self.corpus.shard_rows(spec, self.s.model.seq_len)
        rows = self.strategy.rows(self, r, spec, rows)
        hook = self.on_step
        on_step = None if hook is None else (lambda info: hook(r, info))
        settings = self.strategy.settings(r, config.settings)
        boxed = members if self.s.time_box else None
        box = None
        if boxed is not None:
            box = timebox.budget(self.rdv.board, r, boxed.addresses, settings.inner.steps)
        keep = self.boundaries.keeper(r) if self.boundaries is not None else None
        self.keep_inputs(r, rows, settings.inner)
        # pinned fp32 on torch's default threads: the ledger's segment audit replays k steps from
        # the node's own committed states, within a tolerance that holds on any thread count
        with self.s.precision():
            local = self.diloco.train_local(rows, settings, on_step, budget_s=box, start=start,
                                            residual=self.residuals.before(r), keep=keep,
                                            landing=landing, lazy_trace=True)  # fmt: skip
        self.residuals.made(r, local.residual)
        if self.boundaries is not None:  # its trace's tail is committed while the round goes
            # on: the store records it at the report (a round that landed the last one inside
            # it took its sketches from the new base, which moves at the next landing: kept now)
            sketched = None if landing is None else self.diloco.state.weights()
            for q in [q for q in self._untraced if q < r - 1]:  # lost: never to be attested
                _ = self._untraced.pop(q)[0].trace  # (its trace thread done and stopped)
            self._untraced[r] = (local, sketched)
        if boxed is not None:
            timebox.post_pace(self.rdv.board, r, local.inner)
        return spec, self.strategy.local_work(self, r, rows, local)

    def keep_inputs(self, r: int, rows: torch.Tensor, inner: InnerConfig) -> None:
        """Keep round ``r``'s rows and inner config for the audit window (:meth:`advance`)."""
        kept = self.boundaries.keep_rounds if self.boundaries is not None else KEEP_ROUNDS
        self.round_inputs = {q: v for q, v in self.round_inputs.items() if q > r - kept}
        self.round_inputs[r] = (rows, inner)

    def advance(
        self, r: int, state: dict[str, torch.Tensor], from_step: int, steps: int
    ) -> dict[str, torch.Tensor]:
        """Re-run ``steps`` of this node's inner steps of round ``r`` from ``state`` (its state
        after ``from_step`` steps) over the round's own rows and settings: a bisection's probe
        (trainer.round.boundaries.Advance), on the CPU in fp32 on this process's threads."""
        kept = self.round_inputs.get(r)
        if kept is None:
            raise TrainerError(
                f"round {r}'s rows and settings are not kept here (kept: "
                f"{sorted(self.round_inputs)}): this node cannot recompute a state inside it"
            )
        rows, inner = kept
        return recompute(lambda _: rows, inner, self.s.model)(r, state, from_step, steps)

    def synchronize(
        self, r: int, group: RoundGroup, local: LocalWork, config: RunConfig
    ) -> tuple[RoundOutcome, RoundGroup]:
        """Average and step; if a member dies, re-form the group with the survivors and retry."""
        assert self.diloco is not None
        timeout = group.averager.timeout if hasattr(group.averager, "timeout") else None
        for retry in range(self.s.max_collective_retries + 1):
            snapshot = self.diloco.snapshot()
            try:
                check = self.packet_check(group, local)
                with self.watched(group):
                    outcome = self.diloco.finish_round(local, group.averager, config.settings,
                                                       check)  # fmt: skip
                    if timeout is not None:
                        group.check_same(outcome.result_hash, timeout)
                return outcome, group
            except CollectiveError as exc:
                self.diloco.restore(snapshot)
                group.close()
                if retry == self.s.max_collective_retries:
                    raise
                log.warning("round %d: %s; re-forming the group without the lost nodes", r, exc)
                window = self.s.membership.collective_timeout_s + 2.0
                attempt = group.members.attempt + 1
                expect = None
                if isinstance(exc, StalledError):  # no need to wait for those: open without them
                    self.stalled.append((r, exc.stalled))
                    expect = set(group.members.addresses) - set(exc.stalled)
                elif isinstance(exc, ForgedPacketError):  # nor with a member whose packet lied
                    self.forged.append((r, exc.offenders))
                    self.rdv.exclude(r, exc.offenders)
                    expect = set(group.members.addresses) - set(exc.offenders)
                members = self.rdv.join(r, attempt, window_s=0.0, timeout_s=window, expect=expect)
                if self.address not in members.addresses:
                    raise LeftOut(r) from exc
                group = self.form_group(members)
                timeout = getattr(group.averager, "timeout", None)
        raise TrainerError("unreachable")

    def packet_check(self, group: RoundGroup, local: LocalWork) -> PacketCheck | None:
        """Post this node's signed commitment to its packet for the group's attempt; the check
        that holds every peer's packet to that peer's (trainer.round.commits). The commits read
        go to the ledger with the round's attestation."""
        if group.world_size == 1 or local.packet is None:
            return None
        packet = self.strategy.exchanged_packet(self, group.members.round, local.packet)
        mine = post_commit(self.rdv, group.members, packet, local.inner.tokens)
        check = PacketCheck(self.rdv, group.members, self.s.membership.collective_timeout_s)
        check.evidence[self.address] = mine
        self.commits[group.members.round] = check
        return check

    def watched(self, group: RoundGroup) -> AbstractContextManager[None]:
        """While the collective runs, a peer whose heartbeat stops ends it (StalledError)."""
        peers = tuple(a for a in group.members.addresses if a != self.address)
        if self.s.membership.heartbeat_timeout_s <= 0 or not peers:
            return nullcontext()
        self.liveness.reset(peers)
        return watching(lambda: self.liveness.check(peers))

    def form_group(self, members: Members) -> RoundGroup:
        """The round's process group; if forming it fails (a member vanished, the rendezvous
        host died), the round re-forms with whoever joins its next attempt."""
        for retry in range(self.s.max_collective_retries + 1):
            try:
                return self.rdv.form_group(members, self.device)
            except CollectiveError as exc:
                if retry == self.s.max_collective_retries:
                    raise
                log.warning("round %d: %s; re-forming", members.round, exc.message)
                window = self.s.membership.collective_timeout_s + 2.0
                members = self.rdv.join(members.round, members.attempt + 1, window_s=0.0,
                                        timeout_s=window)  # fmt: skip
                if self.address not in members.addresses:
                    raise LeftOut(members.round) from exc
        raise TrainerError("unreachable")

    def save_and_publish(self, r: int, group: RoundGroup) -> RoundCheckpoint:
        assert self.diloco is not None
        ckpt = RoundCheckpoint.of(self.diloco.state, r, self.s.run_id)
        self.state_round = r
        self.held = {k: v for k, v in self.held.items() if k >= r - 2} | {r: ckpt.weights_hash}
        if self.disk is not None:
            self.disk.save(ckpt)
        self.residuals.landed_round(r)  # the sparse residual beside it
        # every member signs the hash it holds and serves the blob peer to peer (from memory, in
        # a background thread: a joiner fetches while the members train the next round)
        honest = [a for a in group.members.addresses if a not in getattr(group, "divergent", ())]
        blob = ckpt.to_bytes()
        manifest, digests = Manifest.of(blob, ckpt.weights_hash, self.s.checkpoint_chunk_bytes)
        self.server.offer(r, blob, digests, manifest)
        self.rdv.checkpoints.publish(r, group.members.attempt, honest.index(self.address),
                                     ckpt.weights_hash,
                                     manifest.body() | {"serve": self.server.endpoint})  # fmt: skip
        # the publisher (rank 0, or the first majority member if rank 0 diverged) gives the ledger
        # the weights when membership changes or the node leaves, not every round (4 B/param):
        # the round's commitments let it replay the rest
        changed = group.members.addresses != self._last_members or r == self._last_round()
        if group.publisher and changed:
            self.upload(ckpt)
        self._last_members = group.members.addresses
        return ckpt

    def upload(self, ckpt: RoundCheckpoint | None = None) -> None:
        """Give the ledger ``ckpt``'s weights (blob store); while it does not answer, the newest
        such checkpoint waits and goes with the next call (before the next round's join, and
        before the node leaves), like the journal's attestations."""
        if ckpt is not None:
            self._upload_due = ckpt
        due = self._upload_due
        if due is None:
            return
        try:
            self.recovery.upload(due)
        except LedgerUnavailableError as exc:
            log.warning("round %d weights not uploaded yet, the ledger is unreachable (%s): "
                        "kept for later", due.round, exc.message)  # fmt: skip
            return
        self._upload_due = None

    def _last_round(self) -> int | None:
        last = self.s.max_rounds
        if self.s.leave_after_round is not None:
            last = min(last or self.s.leave_after_round, self.s.leave_after_round)
        return last

    # --- loop -------------------------------------------------------------------------------

    def first_round(self) -> int:
        """Start-up: the stake and registration first (an unadmitted node is told what to do,
        not left waiting for peers that refuse it), the journal's unsent rounds next, then the
        newest verified state (:meth:`Recovery.initial`)."""
        self.recovery.check_admitted(self.address)
        if self.attester.backlog:
            self.attester.flush()
        ckpt = self.recovery.initial(self.rdv.checkpoints, self.disk, self_address=self.address)
        self.adopt(ckpt)
        return max(ckpt.round + 1, self.rdv.current_round() + 1)

    def group_for(self, members: Members) -> RoundGroup:
        """The process group of ``members``: the last round's group while the member list is the
        same (and nobody diverged), else a new one. Every member decides the same way from the
        same closed lists, so they keep or rebuild together."""
        kept, self._group = self._group, None
        if kept is not None and kept.members.addresses == members.addresses:
            kept.members = members
            return kept
        if kept is not None:
            kept.close()
        self.groups_formed += 1
        return self.form_group(members)

    def keep_group(self, group: RoundGroup) -> None:
        """Keep ``group`` for the next round (:meth:`group_for` reuses it while the member list
        is the same)."""
        self._group = group

    def drop_group(self) -> None:
        if self._group is not None:
            self._group.close()
            self._group = None

    def drop_state(self) -> None:
        """This node's state is not its round's (evicted, or the round finished without it): the
        next round starts from a peer's checkpoint."""
        self.state_round = -1
        self.residuals.drop()

    def run_round(self, r: int) -> RoundReport | None:
        """Round ``r``: the opening gates, then the inner phase and the group; the schedule does
        the rest. Returns the report of the round that landed in it (lockstep: round r; the
        delayed outer step: round r - 1), if any."""
        if not self.strategy.takes_part(self, r):
            self.rdv.announce_leave(r)  # the members do not wait for it
            return self._outside(r, off_round=True)
        if self.rdv.opened_without_me(r) is not None or (
            self.rdv.ledger is not None and self.rdv.forming_without_me(r)
        ):
            # a late start (a joiner still fetching its checkpoint): a ledger join now could be
            # taken (its window outlasts the list's) and charged as a no-show (ledger.intake.
            # membership), since the members may train r without this node
            log.info("round %d's member list opened or is forming without this node; joining "
                     "the next", r)  # fmt: skip
            return self._outside(r)
        joined = self.attester.join(r)  # the ledger's members: signed joins before the round
        self.upload()  # a checkpoint upload an outage held back
        if not joined:
            # not a member of round r anywhere: the rendezvous closes r from the ledger's joins
            # and does not wait for it; it joins r + 1 (fetching round r's checkpoint from a peer)
            log.info("round %d started at the ledger without this node; trying the next one", r)
            return self._outside(r)
        members = self.join(r)
        if self.address not in members.addresses:
            log.info("round %d closed without this node; trying the next one", r)
            return self._outside(r)
        try:
            config, members = self.read_config(members)
        except SatOut:
            log.warning("round %d: sat out (config not agreed at the round's block)", r)
            return self._outside(r)
        landed = self.schedule.opened(members)
        self.resync(r)
        if self.schedule.holds(self.state_round) != r - 1:
            # a joiner fetches while the members train; groups form after
            self.adopt(self.recovery.catch_up(self.rdv.checkpoints, r - 1))
            self.schedule.restart()
        try:
            spec, local = self.train_local(r, config, members, start=self.schedule.start,
                                           landing=self.schedule.landing)  # fmt: skip
        except RoundLost as exc:  # the bounded overlap's landing lost round r - 1, and r with it
            log.warning("%s", exc)
            self.schedule.restart()
            return None
        try:
            group = self.group_for(members)
        except LeftOut:
            log.warning("round %d re-formed without this node; rejoining next round", r)
            self.schedule.restart()
            return landed or self.schedule.drain()
        return self.schedule.worked(RoundWork(r, config, spec, local), group) or landed

    def resync(self, r: int) -> bool:
        """Before round ``r``: adopt the ledger's committed state when this node's lineage left
        it (the ledger left an update out, or a member equivocated on its packet and the ledger's
        step is not the group's). The ledger may be a round behind (the join window), so the
        newest round it judged among the last two this node held is compared; on a difference
        the node trains round ``r`` from the ledger's state, the base the ledger will expect.
        True when it resynced. Nothing in flight is touched (the delayed outer step resyncs once
        its round has landed)."""
        held = self.state_round
        if self.diloco is None or held < 1 or self.schedule.holds(held) != held:
            return False
        for c in (held, held - 1):
            mine = self.held.get(c)
            if mine is None or c < 1:
                continue
            committed = self.recovery.ledger_outer(c)
            if committed is None:
                continue
            if committed.checkpoint == mine:
                return False
            ckpt = self.recovery.resync(c, committed)
            if ckpt is None:
                return False
            log.warning("round %d: this node held 0x%s.. after round %d, the ledger committed "
                        "0x%s..: training from the ledger's state", r, mine.hex()[:12], c,
                        committed.checkpoint.hex()[:12])  # fmt: skip
            self.adopt(ckpt)
            self.state_round = r - 1  # the ledger's newest state is the base it expects
            self.schedule.restart()
            self.resyncs.append(c)
            return True
        return False

    def _outside(self, r: int, *, off_round: bool = False) -> RoundReport | None:
        """This node works no part of round ``r``: what is in flight lands first (in the last
        round's group), then the group goes (the members of round r form theirs without it)."""
        landed = self.schedule.drain()
        if off_round:
            self.strategy.off_round(self, r)
        self.drop_group()
        return landed

    def report(self, done: RoundWork, group: RoundGroup, outcome: RoundOutcome) -> RoundReport:
        """Evaluate the model (holding the round's result), sign and publish the attestation."""
        r, config, spec, local = done.round, done.config, done.spec, done.local
        eval_loss = None
        if self.eval_rows is not None and self.diloco is not None:
            eval_loss = self.diloco.evaluate(self.eval_rows)
        work = WorkRecord(
            round=r,
            config_version=config.version,
            base_checkpoint=local.base_hash,
            pseudo_gradient=local.commitment(),  # the all-reduce's packet (reference.commitment)
            data_shard=spec.id,
            inner_steps=local.inner.steps,
            tokens=local.inner.tokens,
            result_checkpoint=outcome.result_hash,
            trace_root=local.trace_root,
        )
        self.finish_trace(r)
        check = self.commits.pop(r, None)
        self.commits = {k: v for k, v in self.commits.items() if k > r}
        commits = check.wires() if check is not None else []
        signed = self.strategy.publish(self, work, group.members.addresses, commits)
        return RoundReport(
            round=r, members=group.members.addresses, rank=group.rank,
            attempts=group.members.attempt + 1, config=config, shard_id=spec.id,
            steps=local.inner.steps, tokens=local.inner.tokens,
            final_loss=local.inner.final_loss, bytes_sent=outcome.bytes_sent,
            base_hash=local.base_hash, result_hash=outcome.result_hash,
            eval_loss=eval_loss, signed=signed, groups_formed=self.groups_formed,
            attested=len(self.attester.acknowledged),
        )  # fmt: skip

    def finish_trace(self, r: int) -> None:
        """Record round ``r``'s trace in the boundary store (waiting for its last commitments,
        which its trace thread made while the exchange went on) before the round is attested:
        the ledger may ask for its boundaries once it holds the attestation."""
        untraced = self._untraced.pop(r, None)
        if self.boundaries is None or untraced is None:
            return
        local, sketched = untraced
        if local.trace is not None:
            self.boundaries.finish(r, local.trace, base=sketched)

    def check_data(self, config: RunConfig) -> None:
        """Refuse to train on data that is not the run's (``TrainingConfig.dataRoot``), before
        a round is spent: :class:`~reference.manifest.DataMismatch` names the roots and files."""
        if config.data_root is not None:
            check_data(self.corpus, config.data_root, what="this node's data")

    def run(self) -> list[RoundReport]:
        self.check_data(self.config_source.read())
        self.heartbeat.start()
        server = None
        if self.attester.ledger is not None and self.boundaries is not None:
            server = BoundaryServer(self.boundaries, self.attester.ledger, self.s.run_id,
                                    self.address, advance=self.advance)  # fmt: skip
            server.start()  # the audit's requests answered while the node trains or waits
        try:
            return self._run()
        finally:
            if server is not None:
                server.stop()
            self.heartbeat.stop()
            if self.boundaries is not None:
                self.boundaries.close()  # the last round's states written before the node exits
            if self._scratch is not None:
                self._scratch.cleanup()
            if self.ranks is not None:
                self.ranks.close()

    def _land_in_flight(self) -> None:
        """The ledger does not answer this node's join: the round in flight (the overlap
        schedule's) lands now, in its group, so its attestation is signed and journaled while
        the node waits, and a node stopped during the outage loses no round it worked."""
        report = self.schedule.drain()
        if report is not None:
            self._landed_early.append(report)

    def _reported(self, report: RoundReport | None, reports: list[RoundReport]) -> None:
        if report is not None:
            reports.append(report)
            if self.on_round is not None:
                self.on_round(report)

    def serve_boundaries(self) -> None:
        """Answer the ledger's requests for boundary states of this node's kept rounds (an
        audit's); a ledger that cannot be reached (this node's signed rounds wait unsent) is
        asked again after a later round."""
        ledger = self.attester.ledger
        if ledger is None or self.boundaries is None or self.attester.unsent():
            return
        try:
            answer_requests(self.boundaries, ledger, self.s.run_id, self.address, self.advance)
        except LedgerError as exc:
            log.warning("boundary requests not answered this round: %s", exc)

    def linger(self, last: int) -> None:
        """Serve the audit of round ``last`` before leaving (NodeSettings.audit_linger_s)."""
        ledger = self.attester.ledger
        if ledger is None or self.boundaries is None or self.s.audit_linger_s <= 0:
            return
        self.attester.drain(None)  # the ledger judges the round once it has the attestation
        linger(self.boundaries, ledger, self.s.run_id, self.address, last,
               self.s.audit_linger_s, advance=self.advance)  # fmt: skip

    def _run(self) -> list[RoundReport]:
        reports: list[RoundReport] = []
        try:
            r = self.first_round()
            last = self._last_round()
            while last is None or r <= last:
                if self.s.hold_file is not None:
                    if holds(self.s.hold_file, r):  # round r-1 lands first: it can be committed
                        self._reported(self.schedule.drain(), reports)  # while the node waits
                    hold_at_boundary(self.s.hold_file, r)
                self.round_now = r
                landed = self.run_round(r)
                early, self._landed_early = self._landed_early, []
                for report in (*early, landed):  # a round landed during a ledger outage first
                    self._reported(report, reports)
                self.serve_boundaries()
                r += 1
            # the members' next list opens without this node (they do not wait for its join),
            # then what is in flight lands: they land it with this node, whose group it is
            # (announced after it, their list waited for this node's join until its timeout)
            self.rdv.announce_leave(r)
            self._reported(self.schedule.drain(), reports)  # what is in flight lands before leaving
            self.linger(r - 1)
        finally:
            self.server.close()
        self.drop_group()
        log.info("%s leaves before round %d", self.address, r)
        self.upload()
        self.leave_journal()
        return reports

    def leave_journal(self, wait_s: float | None = None) -> None:
        """Before the node stops: send what is unsent (waiting up to ``wait_s``, default the
        attester's ``behind_wait_s``); what still is not is an error naming the rounds (exit 4),
        kept in the journal for the next start."""
        attester = self.attester
        if attester.ledger is None:
            return
        attester.close()  # the sender stops; what it holds goes now (a refusal it met raises)
        attester.drain(wait_s)
        if attester.backlog:
            where = f" in the journal {attester.journal.path}" if attester.journal else ""
            raise LedgerUnavailableError(
                f"the ledger did not accept the attestations of rounds {attester.unsent()}; "
                f"they stay{where} and are sent first when the node starts again with the "
                "same --checkpoint-dir: check --ledger-url and that the ledger is running"
            )
