"""The red team's cheating strategies for real nodes (``ATTACKS``): :class:`Strategy` hooks
(``trainer.round.strategy``) that :class:`trainer.round.node.NodeRunner` calls (the same node
code honest nodes run).

A cheater sees only what a real node sees: its own work, the all-reduce's average, and what the
ledger makes public (a round's pseudo-gradients once it is scored). So it copies another node's
latest *public* update, the previous round's mean, or its own earlier update; a sybil pair shares
one computation through its operator's disk. Updates that cannot go through the all-reduce (a
wrong-shaped tensor, a 1e6x update that would blow up everyone's model) are posted to the ledger
without taking part in the collective, as are the membership, replay and jump-ahead attacks: all
through the node's own key and ledger client. :class:`Scheduled` runs one node honestly except in
the rounds it attacks.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from protocol.blobs import decode_blob, encode_blob
from protocol.eip712 import keccak256
from protocol.errors import ColocoError
from reference import commitment
from reference.checkpoint import load_weights_into
from reference.codec import Packet, decode, encode
from reference.data import ShardSpec
from reference.inner import InnerTrainer
from reference.model import GPT
from trainer.round.attest import Signed, WorkRecord
from trainer.round.diloco import LocalWork, RoundSettings
from trainer.round.node import NodeRunner
from trainer.round.recovery import genesis_checkpoint
from trainer.round.runconfig import RunConfig
from trainer.round.strategy import Strategy

log = logging.getLogger(__name__)

PHANTOM = "0xABaBaBaBABabABabAbAbABAbABabababaBaBABaB"  # unregistered


# --- what a node can do and see ------------------------------------------------------------------


def post(
    node: NodeRunner, work: WorkRecord, members: Sequence[str], commits: Sequence[str] = ()
) -> tuple[Signed, str]:
    """Sign ``work`` with the node's key, upload its blob, submit (with the members' signed packet
    commitments ``commits``): (signed, "accepted" or the ledger's refusal code). Unlike
    ``Attester.publish`` a refusal is returned, not raised."""
    a = node.attester
    assert a.ledger is not None
    att = a.attestation(work)
    sig = a.key.sign_attestation(att, a.domain)
    try:
        a.ledger.put_blob(att.pseudo_gradient, encode_blob(work.pseudo_gradient))
        ledger_id = a.ledger.submit_attestation(att, sig, members, commits)
    except ColocoError as exc:
        return Signed(att, sig, None), str(getattr(exc, "code", type(exc).__name__))
    return Signed(att, sig, ledger_id), "accepted"


def post_persistently(node: NodeRunner, work: WorkRecord, members: Sequence[str]) -> str:
    """:func:`post` again while the ledger is behind (``future_round``), up to a minute."""
    deadline = time.monotonic() + 60
    while True:
        code = post(node, work, members)[1]
        if code != "future_round" or time.monotonic() > deadline:
            return code
        time.sleep(0.2)


def round_view(node: NodeRunner, q: int, timeout: float = 240.0) -> dict[str, Any]:
    """Round ``q`` as the ledger shows it once scored (its pseudo-gradients are public then)."""
    assert node.attester.ledger is not None
    http = node.attester.ledger.http
    deadline = time.monotonic() + timeout
    while True:
        resp = http.get(f"/v1/runs/0x{node.s.run_id.hex()}/rounds/{q}")
        if resp.status_code == 200:
            body: dict[str, Any] = resp.json()
            if body.get("scores") and body.get("state") not in ("open", "closing"):
                return body
        if time.monotonic() > deadline:
            raise TimeoutError(f"round {q} was not scored within {timeout:.0f}s")
        time.sleep(0.2)


def public_packets(node: NodeRunner, q: int) -> list[tuple[str, Packet]]:
    """(node, commitment packet) of round ``q``'s paid pseudo-gradients, other nodes' only."""
    assert node.attester.ledger is not None
    out = []
    for s in round_view(node, q)["scores"]:
        if not s["verified"] or s["node"] == node.address:
            continue
        blob = node.attester.ledger.get_blob(bytes.fromhex(s["pseudo_gradient"][2:]))
        if blob is not None:
            out.append((s["node"], commitment.packet_of(decode_blob(blob, max_bytes=1 << 30))))
    return sorted(out, key=lambda x: x[0])


def work_of(node: NodeRunner, r: int, pg: dict[str, Tensor], result: bytes) -> WorkRecord:
    """An attestation's numbers for round ``r`` with the governed work and the node's own shard."""
    cfg: RunConfig = node.config_source.read()
    tokens = cfg.settings.inner.tokens(node.s.model.seq_len)
    spec = ShardSpec.for_node(node.s.run_id, r, node.address, tokens, cfg.mixture)
    assert node.diloco is not None
    return WorkRecord(round=r, config_version=cfg.version, base_checkpoint=node.diloco.base_hash(),
                      pseudo_gradient=pg, data_shard=spec.id, inner_steps=cfg.settings.inner.steps,
                      tokens=tokens, result_checkpoint=result,
                      trace_root=keccak256(b"cheat trace: " + result))  # fmt: skip


def noise_like(flat: Tensor, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    scale = float(flat.norm()) / max(flat.numel(), 1) ** 0.5
    noise: Tensor = torch.randn(flat.shape, generator=g)
    return torch.mul(noise, scale)


class Cheat(Strategy):
    """A strategy with the round's settings at hand and a log of what the ledger answered."""

    round_settings: RoundSettings | None = None

    def __init__(self) -> None:
        self.posts: dict[int, list[str]] = {}
        self.owner: Scheduled | None = None

    def note(self, r: int, what: str) -> None:
        self.posts.setdefault(r, []).append(what)

    def settings(self, r: int, settings: RoundSettings) -> RoundSettings:
        self.round_settings = settings
        return settings

    def with_pg(self, node: NodeRunner, local: LocalWork, flat: Tensor) -> LocalWork:
        """``local`` with ``flat`` as the pseudo-gradient it all-reduces and commits to."""
        assert node.diloco is not None and self.round_settings is not None
        base = node.diloco.state.base
        packet = encode(base, base - flat, self.round_settings.wire_format)
        return dataclasses.replace(local, pseudo_gradient=flat, packet=packet)

    def with_packet(self, local: LocalWork, packet: Packet) -> LocalWork:
        return dataclasses.replace(local, pseudo_gradient=decode(packet), packet=packet)

    def claim(self, node: NodeRunner, local: LocalWork, governed: Any) -> LocalWork:
        """Claim (and weigh in the all-reduce as) the governed work, whatever was run."""
        inner = dataclasses.replace(
            local.inner, steps=governed.steps, tokens=governed.tokens(node.s.model.seq_len)
        )
        return dataclasses.replace(local, inner=inner)

    def publish(
        self, node: NodeRunner, work: WorkRecord, members: Sequence[str], commits: Sequence[str]
    ) -> Signed:
        signed, code = post(node, self.work(work), self.members(node, members), commits)
        self.note(work.round, code)
        return signed

    def work(self, work: WorkRecord) -> WorkRecord:
        return work

    def members(self, node: NodeRunner, members: Sequence[str]) -> list[str]:
        return list(members)


# --- updates that go through the all-reduce -------------------------------------------------------


class ZeroUpdate(Cheat):
    name = "zero_update"

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        return self.with_pg(node, local, torch.zeros_like(local.pseudo_gradient))


class GaussianNoise(Cheat):
    name = "gaussian_noise"

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        return self.with_pg(node, local, noise_like(local.pseudo_gradient, r))


class ReducerLie(Cheat):
    """Security review F6, the lying reducer, against the checked all-gather: it commits to its
    true packet, sends its peers another (its codes nudged by one step, its own copy kept true),
    so that every honest member would average a wrong mean while its own stays the ledger's.
    Each peer holds the packet to the signed commitment: the liar is named and the round
    re-forms without it."""

    name = "reducer_lie"

    def __init__(self) -> None:
        super().__init__()
        self.true: Packet | None = None

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        assert local.packet is not None
        self.true = local.packet
        payload = local.packet.payload.clone()
        flat = payload.view(-1)
        if payload.dtype == torch.int8:
            flat[::2] = torch.where(flat[::2] > 0, flat[::2] - 1, flat[::2] + 1)
        else:
            flat[::2] *= 1.5
        lie = dataclasses.replace(local.packet, payload=payload)
        return dataclasses.replace(local, packet=lie)

    def exchanged_packet(self, node: NodeRunner, r: int, packet: Packet) -> Packet:
        return self.true if self.true is not None else packet


class CopyExact(Cheat):
    """Another node's latest public update, byte for byte."""

    name = "copy_exact"

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        return self.with_packet(local, public_packets(node, r - 1)[0][1])


class CopyNoise(Cheat):
    """Another node's latest public update, rescaled by 1.3 and with 6% noise (of its norm)."""

    name = "copy_with_noise"

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        victim = decode(public_packets(node, r - 1)[0][1])
        return self.with_pg(node, local, 1.3 * (victim + 0.06 * noise_like(victim, 99 + r)))


class PreviousMean(Cheat):
    name = "previous_round_mean"

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        flats = [decode(p) for _, p in public_packets(node, r - 1)]
        return self.with_pg(node, local, torch.stack(flats).mean(0))


class ResendOwn(Cheat):
    """Its own update of its first round, committed again."""

    name = "resend_own_update"

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        assert self.owner is not None and self.owner.packets
        return self.with_packet(local, self.owner.packets[0])


class StaleBase(Cheat):
    """Trains from the genesis weights instead of the committed checkpoint (and says so)."""

    name = "stale_base"

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        assert node.diloco is not None and self.round_settings is not None
        genesis = genesis_checkpoint(node.s.model, node.s.seed)
        model = GPT(node.s.model)
        load_weights_into(model, {n: t.clone() for n, t in genesis.weights.items()})
        InnerTrainer(model, self.round_settings.inner, keep_state=False).train(rows)
        layout = node.diloco.state.layout
        g, trained = layout.flatten(genesis.weights), layout.flatten(dict(model.named_parameters()))
        packet = encode(g, trained.detach(), self.round_settings.wire_format)
        pg = (g - trained).detach()
        return dataclasses.replace(local, base_hash=genesis.weights_hash, pseudo_gradient=pg,
                                   packet=packet)  # fmt: skip


class FewerSteps(Cheat):
    """Runs half the governed steps, claims (and weighs in as) all of them."""

    name = "fewer_steps_than_claimed"
    governed: Any = None

    def settings(self, r: int, settings: RoundSettings) -> RoundSettings:
        self.governed = settings.inner
        half = dataclasses.replace(settings.inner, steps=max(1, settings.inner.steps // 2))
        return super().settings(r, dataclasses.replace(settings, inner=half))

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        return self.claim(node, local, self.governed)


class HalfStepsScaled(FewerSteps):
    """Half the steps, scaled up to the norm of an honest update (the previous round's median)."""

    name = "half_steps_scaled_up"

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        norms = sorted(float(decode(p).norm()) for _, p in public_packets(node, r - 1))
        target = norms[len(norms) // 2]
        own = local.pseudo_gradient
        scaled = self.with_pg(node, local, own * (target / max(float(own.norm()), 1e-12)))
        return self.claim(node, scaled, self.governed)


class OtherData(Cheat):
    """Trains on another shard (cheaper to get, or the operator's own data), claims its own."""

    name = "other_data"

    def rows(self, node: NodeRunner, r: int, spec: ShardSpec, rows: Tensor) -> Tensor:
        other = dataclasses.replace(spec, node="0x" + "5e" * 20)
        return node.corpus.shard_rows(other, node.s.model.seq_len)


class ForgedMoments(Cheat):
    """Trains every step honestly, but from AdamW moments it chose: the exp_avg it carries into
    the round x 4 (a push along its own momentum). Each segment replays exactly from its
    committed boundary 0; the continuity check (ledger.judge.continuity) holds that boundary's
    AdamW state to the one the node's round r-1 ended with."""

    name = "forged_moments"
    node: NodeRunner | None = None

    def rows(self, node: NodeRunner, r: int, spec: ShardSpec, rows: Tensor) -> Tensor:
        self.node = node  # the settings hook comes next, just before the inner steps
        return rows

    def settings(self, r: int, settings: RoundSettings) -> RoundSettings:
        settings = super().settings(r, settings)
        diloco = self.node.diloco if self.node is not None else None
        if diloco is not None and settings.keep_inner_state:
            for held in diloco.inner_trainer(settings).optimizer().state.values():
                if "exp_avg" in held:
                    held["exp_avg"].mul_(4.0)
        return settings


class PhantomMember(Cheat):
    """Declares an unregistered member, to hold the round open until its deadline."""

    name = "phantom_member"

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        return self.with_pg(node, local, noise_like(local.pseudo_gradient, 11 + r))

    def members(self, node: NodeRunner, members: Sequence[str]) -> list[str]:
        return [*members, PHANTOM]


class SybilPrimary(Cheat):
    """The first identity of a sybil pair: honest work, shared with the second through disk."""

    name = "sybil_primary"

    def __init__(self, share: Path) -> None:
        super().__init__()
        self.share = share

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        assert local.packet is not None
        tmp = self.share / f"{r}.tmp"
        torch.save(commitment.tensors_of(local.packet), tmp)
        tmp.rename(self.share / f"{r}.pt")
        return local


class SybilShared(Cheat):
    """The second identity: reports the first one's computation as its own."""

    name = "sybil_shared_computation"

    def __init__(self, share: Path) -> None:
        super().__init__()
        self.share = share

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        path = self.share / f"{r}.pt"
        deadline = time.monotonic() + 120
        while not path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the sybil primary never shared round {r}")
            time.sleep(0.05)
        return self.with_packet(local, commitment.packet_of(torch.load(path)))


# --- honest updates, dishonest attestations -------------------------------------------------


class InflatedTokens(Cheat):
    name = "inflated_tokens"

    def work(self, work: WorkRecord) -> WorkRecord:
        return dataclasses.replace(work, tokens=work.tokens * 100)


class CheckpointHijack(Cheat):
    name = "checkpoint_hijack"

    def work(self, work: WorkRecord) -> WorkRecord:
        return dataclasses.replace(work, result_checkpoint=bytes([0x0F]) * 32)


class ZeroCheckpoint(Cheat):
    name = "zero_checkpoint"

    def work(self, work: WorkRecord) -> WorkRecord:
        return dataclasses.replace(work, result_checkpoint=bytes(32))


class Equivocation(Cheat):
    """Signs and posts two different attestations for one round."""

    name = "equivocation"

    def publish(
        self, node: NodeRunner, work: WorkRecord, members: Sequence[str], commits: Sequence[str]
    ) -> Signed:
        signed, code = post(node, work, members, commits)
        self.note(work.round, code)
        _, code = post(node, dataclasses.replace(work, result_checkpoint=bytes([0xE1]) * 32),
                       members, commits)  # fmt: skip
        self.note(work.round, code)
        return signed


# --- outside the all-reduce: the node's key and ledger client only --------------------------------


class OffRound(Cheat):
    def takes_part(self, node: NodeRunner, r: int) -> bool:
        return False

    def trained(self, node: NodeRunner, r: int) -> dict[str, Tensor]:
        """Its honest pseudo-gradient of round ``r`` (trained alone, never all-reduced)."""
        assert node.diloco is not None
        _, local = node.train_local(r, node.config_source.read())
        return local.pseudo_gradient_tensors(node.diloco.state)


class TinyJunk(OffRound):
    name = "tiny_junk"

    def off_round(self, node: NodeRunner, r: int) -> None:
        self.note(r, f"join {node.attester.join(r)}")
        work = work_of(node, r, {"w": torch.tensor([1.0])}, bytes([0x22]) * 32)
        self.note(r, post(node, work, [node.address])[1])


class HugeScale(OffRound):
    """Its own update times 1e6 (posted without poisoning the members' all-reduce)."""

    name = "huge_scale"

    def off_round(self, node: NodeRunner, r: int) -> None:
        self.note(r, f"join {node.attester.join(r)}")
        pg = {n: t * 1e6 for n, t in self.trained(node, r).items()}
        self.note(r, post(node, work_of(node, r, pg, bytes([0x33]) * 32), [node.address])[1])


class RoundTakeover(OffRound):
    """Posts round r at its start, without a join, declaring itself the only member."""

    name = "round_takeover"

    def off_round(self, node: NodeRunner, r: int) -> None:
        assert node.diloco is not None
        layout = node.diloco.state.layout
        pg = layout.unflatten(noise_like(torch.ones(layout.numel), 7 + r) * 1e-3)
        work = work_of(node, r, pg, bytes([0x11]) * 32)
        self.note(r, post_persistently(node, work, [node.address]))


class JumpAhead(OffRound):
    """During round r, joins and attests round r + 1 alone (to commit it first); sits r + 1 out."""

    name = "jump_ahead"
    first: int | None = None

    def off_round(self, node: NodeRunner, r: int) -> None:
        if self.first is None:
            self.first = r
        if r != self.first:
            return
        self.note(r, f"join r+1 {node.attester.join(r + 1)}")
        work = work_of(node, r + 1, self.trained(node, r), bytes([0x44]) * 32)
        self.note(r, post_persistently(node, work, [node.address]))


class ReplayAttestation(OffRound):
    """Re-posts its signed attestation of an earlier round instead of working."""

    name = "replay_old_attestation"

    def off_round(self, node: NodeRunner, r: int) -> None:
        assert self.owner is not None and self.owner.signed and node.attester.ledger is not None
        signed, members = self.owner.signed[0]
        try:
            node.attester.ledger.submit_attestation(signed.attestation, signed.signature, members)
            self.note(r, "accepted (its old id)")
        except ColocoError as exc:
            self.note(r, str(getattr(exc, "code", type(exc).__name__)))


# --- the audit draw -------------------------------------------------------------------------------


class DrawGrinder(HalfStepsScaled):
    """Work only a replay would refute (half the steps, scaled up), signed under every
    configVersion the ledger accepts (any not newer than the chain's); posts the one the old
    draw, keccak of the attestation digest, skipped (issue 25, F11). The ledger now draws from a
    seed fixed after the round closes: which version is posted moves nothing."""

    name = "draw_grinder"
    fraction = 0.1  # the red team's AUDIT_FRACTION

    def publish(
        self, node: NodeRunner, work: WorkRecord, members: Sequence[str], commits: Sequence[str]
    ) -> Signed:
        a = node.attester
        versions = [
            dataclasses.replace(work, config_version=v) for v in range(work.config_version, -1, -1)
        ]
        dodging = [w for w in versions if not self._old_draw(a.attestation(w).digest(a.domain))]
        chosen = dodging[0] if dodging else work
        self.note(work.round, f"v{chosen.config_version}: {len(dodging)} of {len(versions)} dodge")
        return super().publish(node, chosen, members, commits)

    def _old_draw(self, digest: bytes) -> bool:
        draw = int.from_bytes(keccak256(bytes(digest) + b"coloco-audit"), "big")
        return draw < int(self.fraction * (1 << 256))


# --- one node's plan ------------------------------------------------------------------------------

HONEST = Strategy()


class Scheduled(Strategy):
    """Honest except in the rounds of ``plan``; keeps its own packets and signed attestations
    (what a cheater may resend) and the CPU seconds it spent training."""

    def __init__(self, plan: dict[int, Strategy]) -> None:
        self.plan = plan
        for s in plan.values():
            if isinstance(s, Cheat):
                s.owner = self
        self.packets: list[Packet] = []
        self.signed: list[tuple[Signed, list[str]]] = []
        self.train_cpu_s = 0.0
        self._t0 = 0.0

    def at(self, r: int) -> Strategy:
        return self.plan.get(r, HONEST)

    def takes_part(self, node: NodeRunner, r: int) -> bool:
        return self.at(r).takes_part(node, r)

    def off_round(self, node: NodeRunner, r: int) -> None:
        log.warning("%s round %d: %s", node.address, r, self.at(r).name)
        self.at(r).off_round(node, r)

    def settings(self, r: int, settings: RoundSettings) -> RoundSettings:
        return self.at(r).settings(r, settings)

    def rows(self, node: NodeRunner, r: int, spec: ShardSpec, rows: Tensor) -> Tensor:
        self._t0 = time.process_time()
        return self.at(r).rows(node, r, spec, rows)

    def exchanged_packet(self, node: NodeRunner, r: int, packet: Packet) -> Packet:
        return self.at(r).exchanged_packet(node, r, packet)

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        out = self.at(r).local_work(node, r, rows, local)
        self.train_cpu_s += time.process_time() - self._t0
        if self.at(r) is HONEST and local.packet is not None:
            self.packets.append(local.packet)
        return out

    def publish(
        self, node: NodeRunner, work: WorkRecord, members: Sequence[str], commits: Sequence[str]
    ) -> Signed:
        s = self.at(work.round)
        signed = s.publish(node, work, members, commits)
        if s is HONEST:
            self.signed.append((signed, list(members)))
        return signed

    def report(self) -> dict[str, Any]:
        posts = {r: s.posts.get(r, []) for r, s in self.plan.items() if isinstance(s, Cheat)}
        return {"train_cpu_s": self.train_cpu_s, "posts": posts,
                "plan": {r: s.name for r, s in self.plan.items()}}  # fmt: skip


ATTACKS: list[type[Cheat]] = [
    ZeroUpdate, GaussianNoise, TinyJunk, HugeScale, CopyExact, CopyNoise, PreviousMean,
    ResendOwn, StaleBase, InflatedTokens, FewerSteps, HalfStepsScaled, OtherData, RoundTakeover,
    JumpAhead, PhantomMember, CheckpointHijack, ZeroCheckpoint, ReplayAttestation, SybilShared,
    Equivocation, DrawGrinder, ReducerLie, ForgedMoments,
]  # fmt: skip
NAMES = [c.name for c in ATTACKS]


def make(name: str, share: Path) -> Cheat:
    """A fresh strategy by name (``sybil_primary`` is the sybil pair's first identity)."""
    if name == SybilPrimary.name:
        return SybilPrimary(share)
    cls = next(c for c in ATTACKS if c.name == name)
    if cls is SybilShared:
        return SybilShared(share)
    return cls()
