"""The evidence of a one-step verdict, and its re-check in one inner step (``coloco audit``).

A bisection (reference.bisect) ends on one step of a node's round: the node's own state before
it, the batch of rows the step reads, the lr of that step, and the node's own claimed state after
it. :class:`Evidence` names them by hash (the states and the batch are blobs in the ledger's blob
store: a state's blob id is its hash, protocol.hashing), with the model shape and the protocol's
AdamW constants, so that anyone can fetch the three blobs and replay the one step
(:func:`recheck`): one inner step, plus hashing the two states and building the model; a
verdict that differs is first replayed on the step's top (reference.confirm), which confirms
the usual cheats at a third of that (``python -m bench.audit --verdict`` measures both against
the node's round).

The evidence is canonical JSON (sorted keys); its keccak is the verdict's id
(:meth:`Evidence.hash`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from protocol.eip712 import keccak256
from protocol.errors import ConfigError
from protocol.hashing import hash_state_dict
from reference.bisect import Bisection, StepCheck, check_step
from reference.confirm import confirm_step
from reference.inner import InnerConfig
from reference.model import GPTConfig

KIND = "one_step_verdict"
BATCH = "rows"
"""The one tensor of a batch's blob: int64 ``[batch_size, seq_len + 1]`` token rows."""


def batch_blob(rows: Tensor) -> dict[str, Tensor]:
    """The blob of one step's batch (its id: :func:`protocol.hashing.hash_state_dict`)."""
    return {BATCH: rows.detach().to(torch.int64).contiguous()}


def _hex(b: bytes) -> str:
    return "0x" + bytes(b).hex()


def _num(value: float) -> float | None:
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class Evidence:
    """What a one-step verdict rests on (module docstring); hashes are 0x-hex."""

    run_id: str
    round: int
    node: str
    step: int
    """The step judged, 0-based in the round: from the state after ``step`` steps to the next."""
    lr: float
    before: str
    after: str
    batch: str
    model: dict[str, int]
    inner: dict[str, Any]
    """The AdamW constants: batch_size, betas, eps, weight_decay, grad_clip."""
    error: dict[str, float | None]
    tolerance: float
    holds: bool
    segment: tuple[int, int] = (0, 0)
    probes: tuple[int, ...] = ()
    shard: dict[str, Any] = field(default_factory=dict)
    """Where the batch comes from (the node's shard and the rows' offset), when known."""
    moved_from: str = ""
    moved_to: str = ""
    """The step ends at the first boundary of a round on the bounded overlap, whose landing
    moved the weights by ``moved_to - moved_from``: the blobs of the round's boundary 0 and of
    its attested base (reference.bisect.check_step's ``move``); empty: no move."""

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["segment"], doc["probes"] = list(self.segment), list(self.probes)
        return {"kind": KIND, **doc}

    def text(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    def hash(self) -> str:
        return _hex(keccak256(self.text().encode()))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Evidence:
        if doc.get("kind") != KIND:
            raise ConfigError(
                f"not a one-step verdict's evidence (kind {doc.get('kind')!r}, expected {KIND!r})"
            )
        names = {f for f in cls.__dataclass_fields__}
        missing = sorted(names - set(doc) - {"segment", "probes", "shard", "moved_from",
                                             "moved_to"})  # fmt: skip
        if missing:
            raise ConfigError(f"the evidence lacks {missing}: it is not a one-step verdict's")
        try:
            kw = {k: doc[k] for k in names if k in doc}
            kw["segment"] = tuple(int(x) for x in doc.get("segment", (0, 0)))
            kw["probes"] = tuple(int(x) for x in doc.get("probes", ()))
            ev = cls(**kw)
            ev.config()
            GPTConfig(**ev.model)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"the evidence does not parse: {exc}") from None
        return ev

    def config(self) -> InnerConfig:
        """The one step's InnerConfig: constant lr, the evidence's AdamW constants."""
        i = self.inner
        return InnerConfig(
            steps=1,
            lr=float(self.lr),
            batch_size=int(i["batch_size"]),
            betas=(float(i["betas"][0]), float(i["betas"][1])),
            eps=float(i["eps"]),
            weight_decay=float(i["weight_decay"]),
            grad_clip=float(i["grad_clip"]),
        )


def make_evidence(
    bisection: Bisection,
    batch: Tensor,
    cfg: InnerConfig,
    model_cfg: GPTConfig,
    *,
    run_id: str,
    round: int,
    node: str,
    segment: tuple[int, int],
    shard: Mapping[str, Any] | None = None,
    moved: tuple[str, str] | None = None,
) -> tuple[Evidence, dict[str, dict[str, Tensor]]]:
    """The evidence of ``bisection`` and the blobs it names (id -> tensors) to store;
    ``moved``: the blob hashes of the round's boundary 0 and attested base when the judged step
    ends with the bounded overlap's move (:attr:`Evidence.moved_to`; those blobs are stored
    already)."""
    before, after = bisection.before, bisection.after
    blobs = {
        _hex(hash_state_dict(before)): dict(before),
        _hex(hash_state_dict(after)): dict(after),
    }
    rows = batch_blob(batch)
    blobs[_hex(hash_state_dict(rows))] = rows
    err = bisection.check.error
    ev = Evidence(
        run_id=run_id.lower(),
        round=round,
        node=node,
        step=bisection.step,
        lr=bisection.lr,
        before=_hex(hash_state_dict(before)),
        after=_hex(hash_state_dict(after)),
        batch=_hex(hash_state_dict(rows)),
        model=model_cfg.to_dict(),
        inner={
            "batch_size": cfg.batch_size,
            "betas": list(cfg.betas),
            "eps": cfg.eps,
            "weight_decay": cfg.weight_decay,
            "grad_clip": cfg.grad_clip,
        },
        error={
            "weights": _num(err.weights),
            "exp_avg": _num(err.exp_avg),
            "exp_avg_sq": _num(err.exp_avg_sq),
        },
        tolerance=bisection.check.tolerance,
        holds=bisection.holds,
        segment=segment,
        probes=bisection.probes,
        shard=dict(shard or {}),
        moved_from=moved[0].lower() if moved else "",
        moved_to=moved[1].lower() if moved else "",
    )
    return ev, blobs


@dataclass(frozen=True)
class Recheck:
    """An auditor's replay of the evidence's step: ``scope`` "top" when the step's top confirmed
    a verdict that differs (reference.confirm: ``params`` of the model's parameters replayed),
    "step" when the whole step was replayed."""

    evidence: Evidence
    check: StepCheck
    seconds: float
    scope: str = "step"
    params: int | None = None

    @property
    def holds(self) -> bool:
        return self.check.holds

    def to_json(self) -> dict[str, Any]:
        e = self.check.error
        return {
            "verdict": "holds" if self.holds else "differs",
            "step": self.evidence.step,
            "round": self.evidence.round,
            "node": self.evidence.node,
            "error": _num(e.value),
            "weights": _num(e.weights),
            "exp_avg": _num(e.exp_avg),
            "exp_avg_sq": _num(e.exp_avg_sq),
            "tolerance": self.check.tolerance,
            "scope": self.scope,
            "params_replayed": self.params,
            "ledger_said": "holds" if self.evidence.holds else "differs",
            "agrees_with_ledger": self.holds == self.evidence.holds,
            "cpu_seconds": self.seconds,
        }


def recheck(
    evidence: Evidence,
    fetch: Callable[[str], Mapping[str, Tensor]],
    *,
    tolerance: float | None = None,
    threads: int | None = None,
    full: bool = False,
) -> Recheck:
    """Fetch the evidence's two states and batch (``fetch(hash)``), check each hashes to what
    the evidence names, and replay the step (``tolerance``: the evidence's when None). A
    verdict that differs is first replayed on the top of the model (reference.confirm), which
    confirms it in a fraction of the step; when the top does not (or ``full``), the whole step."""
    import time

    got: dict[str, Mapping[str, Tensor]] = {}
    named = ("before", "after", "batch") + (("moved_from", "moved_to") if evidence.moved_to
                                             else ())  # fmt: skip
    for what in named:
        blob_hash = str(getattr(evidence, what))
        tensors = fetch(blob_hash)
        actual = _hex(hash_state_dict(tensors))
        if actual != blob_hash.lower():
            raise ConfigError(
                f"the evidence's {what} blob {blob_hash} hashes to {actual}: it is not the blob "
                "the verdict names"
            )
        got[what] = tensors
    if BATCH not in got["batch"]:
        raise ConfigError(f"the batch blob {evidence.batch} has no {BATCH!r} tensor")
    model_cfg = GPTConfig(**evidence.model)
    held_by(model_cfg, got["before"])
    began = time.process_time()
    tol = evidence.tolerance if tolerance is None else tolerance
    step = (got["before"], got["after"], got["batch"][BATCH], evidence.config(), model_cfg)
    move = (got["moved_from"], got["moved_to"]) if evidence.moved_to else None
    if not evidence.holds and not full:
        top = confirm_step(*step, tolerance=tol, threads=threads, move=move)
        if top.confirms:
            return Recheck(evidence, StepCheck(top.error, top.threshold),
                           time.process_time() - began, "top", top.params)  # fmt: skip
    check = check_step(*step, tolerance=tol, threads=threads, move=move)
    return Recheck(evidence, check, time.process_time() - began)


def held_by(model_cfg: GPTConfig, state: Mapping[str, Tensor]) -> None:
    """Refuse a model shape that ``state`` does not hold, before anything of that shape is
    built: the evidence names the shape and the blobs hold the tensors (each bounded by what the
    fetch accepts), so an evidence that names a larger model than its state (a hostile ledger's:
    a million blocks, or a width of a million) cannot make the auditor build it. Its blocks,
    width, vocabulary, context and MLP width are read off the state's own tensors."""
    blocks = {k.split(".")[1] for k in state if k.startswith("weights/blocks.")}
    d, mlp = model_cfg.d_model, model_cfg.mlp_ratio * model_cfg.d_model
    want = {
        "weights/tok_emb.weight": (model_cfg.vocab_size, d),
        "weights/pos_emb.weight": (model_cfg.seq_len, d),
        "weights/blocks.0.mlp.up.weight": (mlp, d),
    }
    held = {k: tuple(state[k].shape) if k in state else None for k in want}
    if len(blocks) != model_cfg.n_layer or any(held[k] != v for k, v in want.items()):
        raise ConfigError(
            f"the evidence's model {model_cfg.to_dict()} is not the one its state holds "
            f"({len(blocks)} blocks, {held}): the evidence or its blobs are not a verdict's"
        )
