"""One node of the in-process red-team network: the same code for honest and cheating nodes; its
:class:`tests.redteam.strategies.SimStrategy` decides every deviation."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Any

import torch

import reference.inner
from bench.harness.nodes import NodeKey
from protocol.attestation import ComputeAttestation
from protocol.blob_auth import UploadSigner
from protocol.blobs import encode_blob
from protocol.errors import TrainerError
from protocol.hashing import hash_state_dict
from protocol.join import RoundJoin
from protocol.keys import NodeKey as SigningKey
from protocol.signing import sign_attestation
from protocol.types import RoundNumber, RunId
from reference.data import Corpus, ShardSpec
from reference.inner import InnerConfig
from reference.mean import simulate_average
from reference.model import GPT
from reference.outer import FlatLayout, OuterConfig, OuterState
from tests.redteam.strategies import RoundView, SimStrategy, Tensors
from trainer.network.ledger_client import LedgerClient
from trainer.round.boundaries import BoundaryStore, answer_requests, recompute
from trainer.round.diloco import DiLoCo, RoundSettings
from trainer.round.runconfig import RunConfig

if TYPE_CHECKING:
    from tests.redteam.network import Network


@cache
def corpus() -> Corpus:
    return Corpus.stdlib()


@dataclass
class Work:
    pseudo_gradient: Tensors  # what the node reports (after its strategy)
    honest: Tensors  # what it computed
    tokens: int
    steps: int
    shard: bytes
    cpu_s: float
    view: RoundView
    trace_root: bytes  # the committed boundaries of its inner steps (reference.trace)

    @property
    def contributes(self) -> bool:
        """A well-formed, finite update can be averaged (a wrong-shaped one breaks the
        all-reduce, so the members leave it out, as the ledger does)."""
        return self.view.extra.get("shape_ok", True) and all(
            bool(torch.isfinite(t).all()) for t in self.pseudo_gradient.values()
        )


class Node:
    def __init__(self, key: NodeKey, net: Network, strategy: SimStrategy, *, label: str) -> None:
        self.key, self.net, self.strategy, self.label = key, net, strategy, label
        self.address = key.address
        self.signer = SigningKey.from_private_key(key.key)
        self.history: list[Tensors] = []
        self.joins: dict[int, bool | str] = {}
        self.signed: dict[int, list[dict[str, Any]]] = {}  # round -> bodies posted
        self.train_cpu_s = 0.0
        self.bases: list[dict[str, torch.Tensor]] = []
        self.model: GPT | None = None
        self.diloco: DiLoCo | None = None
        """Its DiLoCo across rounds (:meth:`holding`), its inner AdamW with it."""
        self.held: tuple[int, bytes] | None = None
        """(round, hash of the weights its outer step computed): what it holds after a round."""
        self.round_inputs: dict[int, tuple[torch.Tensor, InnerConfig]] = {}
        """The rows and inner settings of its rounds in the audit window (:meth:`advance`)."""
        self.boundaries = BoundaryStore(net.work / "nodes" / self.address)
        """The boundary states it committed, served when the ledger's segment audit asks."""
        self.ledger = LedgerClient("http://testserver", http=net.client,
                                   uploader=UploadSigner(key.key, net.domain))  # fmt: skip

    def serve(self) -> int:
        """Answer the ledger's boundary requests and a bisection's probes (unless the strategy
        withholds them)."""
        if self.strategy.withhold_boundaries():
            return 0
        return answer_requests(self.boundaries, self.ledger, bytes.fromhex(self.net.run_id[2:]),
                               self.address, self.advance)  # fmt: skip

    def advance(
        self, r: int, state: dict[str, torch.Tensor], from_step: int, steps: int
    ) -> dict[str, torch.Tensor]:
        """A bisection's probe, answered as ``NodeRunner.advance`` does: ``steps`` of its own
        inner steps of round ``r`` re-run from ``state`` over the rows and settings it trained
        with (a cheat's own, so a probe tells what it really did)."""
        kept = self.round_inputs.get(r)
        if kept is None:
            raise TrainerError(f"round {r}'s rows and settings are not kept here (kept: "
                               f"{sorted(self.round_inputs)})")  # fmt: skip
        rows, inner = kept
        return recompute(lambda _: rows, inner, self.net.model)(r, state, from_step, steps)

    # --- protocol steps ---------------------------------------------------------------------

    def join(self, r: int) -> None:
        target = self.strategy.join_round(r)
        if target is None:
            return
        join = RoundJoin(
            RunId(bytes.fromhex(self.net.run_id[2:])), RoundNumber(target), self.signer.address
        )
        sig = self.signer.sign_digest(join.digest(self.net.domain))
        resp = self.net.client.post(
            "/v1/joins", json={"join": join.to_json(), "signature": "0x" + sig.hex()}
        )
        self.joins[target] = resp.status_code == 202 or resp.json()["error"]["code"]

    def train(self, r: int, base: dict[str, torch.Tensor]) -> Work:
        """Round ``r``'s inner steps as the real node runs them (trainer.round.diloco's
        ``DiLoCo.train_local``: the protocol's inner mode, its boundary states committed with the
        AdamW moments they hold), with the strategy's deviations: an older start, another shard,
        fewer steps."""
        net, cfg = self.net, self.net.cfg
        self.bases.append(base)
        tokens = cfg.inner_steps * cfg.batch * net.model.seq_len
        owner = self.address
        if self.strategy.train_on_other_data():
            owner = "0x" + bytes(hash_state_dict({"x": torch.tensor([r])}))[:20].hex()
        spec = ShardSpec.for_node(bytes.fromhex(net.run_id[2:]), r, owner, tokens, (10_000,))
        rows = corpus().shard_rows(spec, net.model.seq_len)
        settings = self.round_settings()
        steps = self.strategy.inner_steps(settings.inner.steps)
        settings = replace(settings, inner=replace(settings.inner, steps=steps))
        diloco = self.holding(r, base)
        self.strategy.carried_moments(diloco.inner_trainer(settings).optimizer())
        start = None
        if self.strategy.stale_base():
            start = diloco.state.layout.flatten(net.genesis_weights)
        self.round_inputs = {q: v for q, v in self.round_inputs.items()
                             if q > r - self.boundaries.keep_rounds}  # fmt: skip
        self.round_inputs[r] = (rows, settings.inner)
        t0 = time.process_time()
        local = diloco.train_local(rows, settings, start=start, keep=self.boundaries.keeper(r))
        cpu = time.process_time() - t0
        assert local.trace is not None
        self.boundaries.finish(r, local.trace)
        self.train_cpu_s += cpu
        own = {n: t.clone() for n, t in local.pseudo_gradient_tensors(diloco.state).items()}
        own_spec = ShardSpec.for_node(
            bytes.fromhex(net.run_id[2:]), r, self.address, tokens, (10_000,)
        )
        view = RoundView(r, self.address, cfg.inner_steps, own_history=list(self.history))
        return Work(own, own, tokens, cfg.inner_steps, own_spec.id, cpu, view, local.trace_root)

    def round_settings(self) -> RoundSettings:
        """The round's settings as a real node reads them from the chain's TrainingConfig
        (``RunConfig.from_settings``), in the protocol's inner mode (reference.inner.CARRY_STATE,
        read now: a test may switch it)."""
        snap = self.net.ledger.indexer.snapshot.config
        assert snap is not None
        run = RunConfig.from_settings(snap, batch_size=self.net.cfg.batch,
                                      keep_inner_state=reference.inner.CARRY_STATE)  # fmt: skip
        return run.settings

    def holding(self, r: int, base: dict[str, torch.Tensor]) -> DiLoCo:
        """The node's DiLoCo holding ``base``, the committed weights round ``r`` starts from. The
        one it trained round r-1 with, when the ledger committed the result this node computed
        (its inner AdamW, carried, lives in it; ``DiLoCo.inner_trainer`` starts a fresh one when
        the inner config or mode differs); else a new one, so a fresh inner state, as
        ``NodeRunner.adopt`` makes at the node's start, a rejoin after rounds it sat out, or a
        resync to a committed state that is not its own result. The outer step itself is
        :meth:`outer_result`'s."""
        layout = FlatLayout({n: t.shape for n, t in base.items()})
        flat = layout.flatten(base)
        kept = self.diloco
        if kept is not None and self.held == (r - 1, bytes(hash_state_dict(base))):
            kept.state.base.copy_(flat)  # its own outer step's result (bit for bit)
            return kept
        if self.model is None:
            self.model = GPT(self.net.model)
        self.diloco = DiLoCo(self.model, OuterState(layout, flat))
        return self.diloco

    def finish(self, work: Work, peers: dict[str, Work], previous_mean: Tensors | None) -> None:
        """Apply the strategy to the computed pseudo-gradient (it may copy what it sees)."""
        view = work.view
        view.peers = {a: w.honest for a, w in peers.items() if a != self.address}
        view.previous_mean = previous_mean
        view.extra["signed"] = self.signed
        norms = sorted(
            float(torch.cat([t.reshape(-1) for t in w.honest.values()]).norm())
            for w in peers.values()
        )
        view.honest_norm = norms[len(norms) // 2] if norms else None
        work.pseudo_gradient = self.strategy.pseudo_gradient(work.honest, view)
        names = set(work.pseudo_gradient) == set(work.honest)
        view.extra["shape_ok"] = names and all(
            work.pseudo_gradient[n].shape == work.honest[n].shape for n in work.honest
        )

    @staticmethod
    def outer_result(
        net: Network,
        base: dict[str, torch.Tensor],
        momentum: dict[str, torch.Tensor] | None,
        pgs: list[Tensors],
        weights: list[int],
    ) -> bytes:
        """The members' outer step: the trainer's average and Nesterov step, in rank order."""
        layout = FlatLayout({n: t.shape for n, t in base.items()})
        state = OuterState(
            layout, layout.flatten(base), layout.flatten(momentum) if momentum else None
        )
        snap = net.ledger.indexer.snapshot.config
        assert snap is not None
        flats = [layout.flatten(pg) for pg in pgs]
        avg = simulate_average(flats, snap.wire_format, weights=weights)
        state.step(avg, OuterConfig(lr=snap.outer_lr, momentum=snap.outer_momentum))
        return bytes(hash_state_dict(state.weights()))

    def attest(self, r: int, work: Work, result: bytes, group: list[str]) -> list[str]:
        """Upload the blob, sign and post the attestation(s) the strategy chooses."""
        net = self.net
        pg = work.pseudo_gradient
        pg_hash = bytes(hash_state_dict(pg))
        net.client.put(
            f"/v1/blobs/0x{pg_hash.hex()}",
            content=encode_blob(pg),
            headers=UploadSigner(self.key.key, net.domain).headers("0x" + pg_hash.hex()),
        )
        base = net.genesis_weights if self.strategy.stale_base() else self.bases[-1]
        cfg = net.ledger.indexer.snapshot.config
        assert cfg is not None
        fields = {
            "runId": net.run_id,
            "round": r,
            "node": self.address,
            "configVersion": cfg.version,
            "baseCheckpoint": "0x" + bytes(hash_state_dict(base)).hex(),
            "pseudoGradient": "0x" + pg_hash.hex(),
            "dataShard": "0x" + work.shard.hex(),
            "innerSteps": work.steps,
            "tokens": work.tokens,
            "resultCheckpoint": "0x" + result.hex(),
            "traceRoot": "0x" + work.trace_root.hex(),
        }
        out = []
        members = self.strategy.round_members(group, work.view)
        for f in self.strategy.attestations(fields, work.view):
            body = f.pop("_body", None)
            if body is None:
                att = ComputeAttestation.from_json(f)
                sig = sign_attestation(att, net.domain, self.key.key)
                body = {
                    "attestation": att.to_json(),
                    "signature": "0x" + sig.hex(),
                    "round_members": members,
                }
            self.signed.setdefault(int(body["attestation"]["round"]), []).append(body)
            out.append(net.post(body))
        self.history.append(work.honest)
        # the state it holds after the round: the members' outer step, if it took part in it
        self.held = (r, result) if self.address in group else None
        return out
