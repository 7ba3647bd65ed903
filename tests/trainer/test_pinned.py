"""The pinned precision an audited node trains in (reference.inner.pinned, issue 26): its settings
applied and restored, a CPU node under it bit for bit what it trained before, a node on
``--device cuda`` selecting it unless ``--bf16`` (checked here without a GPU; the GPU measurement
is ``python -m bench.gpu_audit``)."""

from __future__ import annotations

import os

import pytest
import torch
from typer.testing import CliRunner

from protocol.errors import ConfigError
from reference.data import ShardSpec
from reference.inner import (
    InnerConfig,
    InnerTrainer,
    autocast_bf16,
    is_pinned,
    pinned,
    precision,
)
from reference.model import GPT, GPTConfig
from trainer.round.node import NodeSettings

CFG = GPTConfig.preset("tiny")


def _flags() -> tuple[object, ...]:
    return (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        torch.are_deterministic_algorithms_enabled(),
        torch.get_float32_matmul_precision(),
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        torch.get_num_threads(),
        is_pinned(),
    )


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1"])
def test_pinned_applies_and_restores(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    torch.backends.cuda.matmul.allow_tf32 = True  # what a user's script may have left on
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    threads = torch.get_num_threads()
    try:
        before = _flags()
        with pinned(device):
            assert torch.backends.cuda.matmul.allow_tf32 is False
            assert torch.backends.cudnn.allow_tf32 is False
            assert torch.backends.cudnn.deterministic is True
            assert torch.backends.cudnn.benchmark is False
            assert torch.are_deterministic_algorithms_enabled()
            assert torch.get_float32_matmul_precision() == "highest"
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
            assert is_pinned()
            # a CPU node trains on one thread (the replay's); a GPU node's CPU threads are its own
            assert torch.get_num_threads() == threads  # the node's threads: any count audits
        assert _flags() == before
        with pytest.raises(RuntimeError), pinned(device):  # restored on an error too
            raise RuntimeError("boom")
        assert _flags() == before
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
        torch.set_float32_matmul_precision("highest")


def _train(rows: torch.Tensor) -> dict[str, torch.Tensor]:
    model = GPT(CFG, seed=3)
    InnerTrainer(model, InnerConfig(steps=4, lr=3e-3, batch_size=4), keep_state=False).train(rows)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_cpu_node_under_pinned_trains_bit_identically_to_unpinned_fp32() -> None:
    from ledger.judge.usefulness import corpus_of

    spec = ShardSpec.for_node(bytes(32), 1, "0x" + "1" * 40, 16 * CFG.seq_len, (10_000,))
    rows = corpus_of(None).shard_rows(spec, CFG.seq_len)
    before = _train(rows)  # fp32 on the CPU already: pinning changes nothing there
    with pinned("cpu"):
        now = _train(rows)
    for name, t in before.items():
        assert torch.equal(t, now[name]), name


def test_node_on_cuda_selects_pinned_unless_bf16() -> None:
    run = bytes(32)
    for device in ("cpu", "cuda", "cuda:0"):
        with NodeSettings(run, CFG, device=device).precision():
            assert is_pinned() and not torch.backends.cuda.matmul.allow_tf32
            assert not autocast_bf16(torch.device(device))
    with NodeSettings(run, CFG, device="cuda", bf16=True).precision():
        # InnerTrainer's bf16 autocast: the rounds fail the audit
        assert not is_pinned() and autocast_bf16(torch.device("cuda"))
    with pytest.raises(ConfigError, match="--bf16"):
        NodeSettings(run, CFG, device="cpu", bf16=True)
    with pytest.raises(ConfigError, match="--bf16"):
        precision("cpu", bf16=True)


def test_node_run_help_says_pinned_and_bf16_fails_the_audit() -> None:
    from coloco_cli.app import app

    result = CliRunner().invoke(app, ["node", "run", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.replace("│", " ").split())
    assert "pinned fp32" in text
    assert "--bf16" in text and "FAIL the audit" in text
