"""Level 2 with the trainer's own-shard test: honest work scores, noise does not, a wrong shard is
refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from sqlmodel import create_engine

from ledger.core.blobstore import BlobStore
from ledger.core.db import create_all
from ledger.core.models import Attestation
from ledger.judge.tensors import ShardMismatch
from ledger.judge.usefulness import trainer_usefulness
from protocol.blobs import encode_blob
from protocol.hashing import hash_state_dict
from reference.data import Corpus, ShardSpec
from reference.model import GPT, GPTConfig

RUN = bytes(range(32))
NODE = "0x" + "11" * 20


def test_honest_scores_noise_does_not_wrong_shard_refused(tmp_path: Path) -> None:
    torch.manual_seed(0)
    cfg = GPTConfig.preset("tiny")
    model = GPT(cfg, seed=0)
    tokens = 16 * cfg.seq_len * 4
    spec = ShardSpec.for_node(RUN, 1, NODE, tokens, (10_000,))
    corpus = Corpus.stdlib()
    rows = corpus.shard_rows(spec, cfg.seq_len)
    warm = corpus.random_rows(cfg.seq_len, 16 * 40, seed=5)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(40):  # a base that has learnt something, as after a few rounds
        batch = warm[step * 16 : (step + 1) * 16]
        _, loss = model(batch[:, :-1], batch[:, 1:])
        assert loss is not None
        opt.zero_grad()
        loss.backward()
        opt.step()
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    for step in range(20):
        batch = rows[(step * 16) % len(rows) :][:16]
        _, loss = model(batch[:, :-1], batch[:, 1:])
        assert loss is not None
        opt.zero_grad()
        loss.backward()
        opt.step()
    honest = {n: base[n] - p.detach() for n, p in model.named_parameters()}
    noise = {n: torch.randn_like(t) * t.norm() / t.numel() ** 0.5 * 3 for n, t in honest.items()}

    engine = create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    create_all(engine)
    blobs = BlobStore(tmp_path / "blobs", engine, max_bytes=1 << 28)
    base_hash = "0x" + hash_state_dict(base).hex()
    blobs.put(base_hash, encode_blob(base))
    scorer = trainer_usefulness(
        blobs,
        preset="tiny",
        corpus_dir=None,
        rows=32,
        mixture_of=lambda: (10_000,),
        outer_lr_of=lambda: 0.7,
    )

    def att(node: str, pg: dict[str, torch.Tensor]) -> Attestation:
        own = ShardSpec.for_node(RUN, 1, node, tokens, (10_000,))
        return Attestation(
            run_id="0x" + RUN.hex(),
            round=1,
            node=node,
            config_version=1,
            base_checkpoint=base_hash,
            pseudo_gradient="0x" + hash_state_dict(pg).hex(),
            data_shard="0x" + own.id.hex(),
            inner_steps=20,
            tokens=tokens,
            result_checkpoint="0x" + "22" * 32,
            trace_root="0x" + "24" * 32,
            digest="0x" + "33" * 32,
            signature="0x",
        )

    honest_m = scorer(att(NODE, honest), honest)
    noisy = "0x" + "55" * 20
    noise_m = scorer(att(noisy, noise), noise)
    assert honest_m is not None and noise_m is not None
    assert honest_m.score > 0.3, honest_m
    assert "own-shard loss" in honest_m.reason
    assert noise_m.score < honest_m.score / 2, noise_m
    # a shard id the node could not have trained on: refused, and the message says which
    wrong = att(NODE, honest)
    wrong.data_shard = "0x" + "66" * 32
    with pytest.raises(ShardMismatch, match="not this node's shard"):
        scorer(wrong, honest)
    # the run pins its data (TrainingConfig.dataRoot): the ledger scores only on those bytes
    for root, measured in ((corpus.root, True), (b"\x01" * 32, False)):
        pinned = trainer_usefulness(
            blobs, preset="tiny", corpus_dir=None, rows=32, mixture_of=lambda: (10_000,),
            outer_lr_of=lambda: 0.7, data_root_of=lambda root=root: root,  # type: ignore[misc]
        )  # fmt: skip
        got = pinned(att(NODE, honest), honest)
        assert (got is not None) == measured  # other data: not measured, never a low score
        if got is not None:
            assert got.score == honest_m.score


def test_settings_enable_the_trainer_scorer(settings_for, db_url) -> None:
    from ledger.service import Ledger

    ledger = Ledger(settings_for(db_url, usefulness_model="tiny"))
    try:
        ledger.prepare_database()
        ledger.start(background=False)
        scorer = ledger.keeper.usefulness
        assert scorer is not None
        missing_base = Attestation(
            run_id="0x" + RUN.hex(), round=1, node=NODE, config_version=1,
            base_checkpoint="0x" + "77" * 32, pseudo_gradient="0x" + "88" * 32,
            data_shard="0x" + "99" * 32, inner_steps=1, tokens=64,
            result_checkpoint="0x" + "22" * 32, trace_root="0x" + "24" * 32,
            digest="0x" + "33" * 32, signature="0x",
        )  # fmt: skip
        assert scorer(missing_base, {"w": torch.ones(2)}) is None  # not measured, not guessed
    finally:
        ledger.stop()
