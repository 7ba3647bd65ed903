"""bench.muon: Newton-Schulz lands a matrix's singular values in the quintic's band, Muon moves
only the blocks' matrices (AdamW, torch's to the bit, everything else), its lr follows the
trainer's schedule times its ratio, and a bench.diloco run with it is deterministic, differs
from the AdamW run, and is reachable from a bench.diloco_search arm."""

from __future__ import annotations

import pytest
import torch

from bench.diloco import Setup, Task, run_task
from bench.diloco_search import parse_arm
from bench.muon import MuonAdamW, MuonConfig, MuonTrainer, inner_trainer, newton_schulz
from reference.inner import InnerConfig, InnerTrainer
from reference.model import GPT, GPTConfig
from reference.outer import OuterConfig

TINY = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32)
SETUP = Setup(model=TINY, workers=2, rounds=2, inner_steps=3, batch=2, inner_lr=3e-3,
              outer=OuterConfig(), eval_rows=16)  # fmt: skip
MATRICES = {"blocks.0.attn.qkv.weight", "blocks.0.attn.proj.weight", "blocks.0.mlp.up.weight",
            "blocks.0.mlp.down.weight"}  # fmt: skip


@pytest.mark.parametrize("shape", [(64, 256), (192, 64), (32, 32)])
def test_newton_schulz_pushes_the_singular_values_into_the_quintics_band(
    shape: tuple[int, int],
) -> None:
    g = torch.randn(*shape, generator=torch.Generator().manual_seed(1)) * 3.7
    out = newton_schulz(g)
    assert out.shape == g.shape
    sv = torch.linalg.svdvals(out)
    # a square Gaussian matrix has a few near-zero singular values the 5 steps cannot lift
    bulk = sv[: int(0.9 * sv.numel())] if shape[0] == shape[1] else sv
    assert float(bulk.min()) > 0.6 and float(sv.max()) < 1.25, sv
    # the same directions: U V^T of the SVD, within the band's error
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    cos = float((out * (u @ vh)).sum() / (out.norm() * (u @ vh).norm()))
    assert cos > 0.95


def _batch() -> torch.Tensor:
    return torch.randint(0, 256, (4, TINY.seq_len + 1), generator=torch.Generator().manual_seed(2))


def test_muon_moves_the_block_matrices_and_adamw_the_rest_as_torch_does() -> None:
    cfg = InnerConfig(steps=3, lr=3e-3, batch_size=2, betas=(0.8, 0.95), eps=1e-4)
    rows = torch.cat([_batch(), _batch()])[:6]
    plain, muon = GPT(TINY, seed=3), GPT(TINY, seed=3)
    InnerTrainer(plain, cfg).train(rows)
    trainer = MuonTrainer(muon, cfg, MuonConfig(lr_ratio=2.0))
    trainer.train(rows)
    opt = trainer.optimizer()
    assert isinstance(opt, MuonAdamW)
    muon_params = {id(p) for g in opt.param_groups if g["muon"] for p in g["params"]}
    names = {n for n, p in muon.named_parameters() if id(p) in muon_params}
    assert names == MATRICES
    # the first step of a non-matrix parameter sees the same gradient in both runs: torch's
    # AdamW and MuonAdamW's AdamW part agree to the bit on it
    one_plain, one_muon = GPT(TINY, seed=3), GPT(TINY, seed=3)
    InnerTrainer(one_plain, InnerConfig(1, 3e-3, 2)).train(rows)
    MuonTrainer(one_muon, InnerConfig(1, 3e-3, 2), MuonConfig()).train(rows)
    for (name, a), b in zip(one_plain.named_parameters(), one_muon.parameters(), strict=True):
        assert torch.equal(a, b) == (name not in MATRICES), name
    # a matrix's first Muon step: lr * ratio * 0.2 * sqrt(max dim) * NS(grad), RMS about 0.2 lr
    start = dict(GPT(TINY, seed=3).named_parameters())
    moved = dict(one_muon.named_parameters())
    for name in MATRICES:
        rms = float((moved[name] - start[name]).detach().square().mean().sqrt())
        assert 0.1 * 3e-3 < rms < 0.3 * 3e-3, (name, rms)
    # Muon's lr is the trainer's (scheduled) lr times lr_ratio: twice the ratio, twice the move
    double = GPT(TINY, seed=3)
    MuonTrainer(double, InnerConfig(1, 3e-3, 2), MuonConfig(lr_ratio=2.0)).train(rows)
    for name, p in double.named_parameters():
        step, once = (p - start[name]).detach(), (moved[name] - start[name]).detach()
        if name in MATRICES:
            assert torch.allclose(step, 2 * once, rtol=1e-3, atol=1e-7), name
        else:
            assert torch.equal(step, once), name


def test_muon_adamw_without_matrices_is_torchs_adamw_to_the_bit() -> None:
    cfg = InnerConfig(steps=4, lr=2e-3, batch_size=2, betas=(0.7, 0.95), eps=1e-4,
                      weight_decay=0.1)  # fmt: skip
    a, b = GPT(TINY, seed=4), GPT(TINY, seed=4)
    ours = MuonAdamW([{"params": list(a.parameters()), "muon": False}], cfg, MuonConfig())
    torchs = torch.optim.AdamW(b.parameters(), lr=2e-3, betas=(0.7, 0.95), eps=1e-4,
                               weight_decay=0.1)  # fmt: skip
    x = _batch()
    for _ in range(4):
        for model, opt in ((a, ours), (b, torchs)):
            opt.zero_grad()
            _, loss = model(x[:, :-1], x[:, 1:])
            assert loss is not None
            loss.backward()
            opt.step()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_a_diloco_run_with_muon_is_deterministic_differs_from_adamw_and_is_an_arm() -> None:
    kind, s, _ = parse_arm("carried:inner_opt=muon,muon_lr=6e-3,muon_momentum=0.9", SETUP)
    assert (kind, s.inner_opt, s.muon_lr, s.muon_momentum) == ("carried", "muon", 6e-3, 0.9)
    assert s.muon(3e-3) == MuonConfig(lr_ratio=2.0, momentum=0.9)
    with pytest.raises(SystemExit, match="inner_opt"):
        parse_arm("carried:inner_opt=sgd", SETUP)
    adamw = run_task(Task("carried", "stdlib", "val", SETUP))
    muon = run_task(Task("carried", "stdlib", "val", s))
    again = run_task(Task("carried", "stdlib", "val", s))
    assert muon == again
    assert muon[0] != adamw[0] and muon[1] == adamw[1]  # another loss, the same bytes
    sync_kind, sync, _ = parse_arm("sync:inner_opt=muon,sync_lr=6e-3", SETUP)
    assert sync_kind == "sync" and sync.muon(sync.sync_lr).lr_ratio == 1.0
    assert (
        run_task(Task("sync", "stdlib", "val", sync))[0]
        != run_task(Task("sync", "stdlib", "val", SETUP))[0]
    )
    with pytest.raises(ValueError, match="inner optimizer"):
        inner_trainer(GPT(TINY), InnerConfig(1, 3e-3), "sgd", MuonConfig(), keep_state=True)
