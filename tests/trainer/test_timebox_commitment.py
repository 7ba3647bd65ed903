"""The time-boxed inner phase and the int8 pseudo-gradient commitment."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from protocol.blobs import blob_id, decode_blob
from protocol.errors import ConfigError, EncodingError
from reference import commitment
from reference.codec import decode, encode, wire_bytes
from reference.data import Corpus, ShardSpec
from reference.inner import InnerConfig, InnerTrainer
from reference.mean import simulate_average
from reference.model import GPT, GPTConfig
from reference.outer import OuterState
from trainer.round.diloco import DiLoCo

SMALL = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32)


def _rows(corpus_dir: Path, steps: int) -> torch.Tensor:
    spec = ShardSpec.for_node(bytes(32), 1, "0x" + "44" * 20, steps * 4 * 32, (5000, 5000))
    return Corpus.from_folder(corpus_dir).shard_rows(spec, 32)


def test_time_box_runs_the_steps_that_fit_and_declares_them(corpus_dir: Path) -> None:
    rows = _rows(corpus_dir, 40)
    trainer = InnerTrainer(GPT(SMALL), InnerConfig(steps=40, lr=1e-3, batch_size=4))
    slow = trainer.train(rows, on_step=lambda _: time.sleep(0.1), budget_s=3.0)
    assert 1 <= slow.steps < 40  # 40 steps sleep 4 s alone: the box must stop it early
    assert slow.tokens == slow.steps * 4 * 32
    # it stops before the step its mean step time says would overrun (one step of slack for
    # a step slower than the mean)
    assert slow.seconds <= 3.0 + 2 * slow.seconds / slow.steps
    fast = trainer.train(rows, budget_s=60.0)
    assert fast.steps == 40  # the budget never adds steps beyond H
    with pytest.raises(ConfigError, match="time budget"):
        trainer.train(rows, budget_s=0.0)


@pytest.mark.parametrize("fmt", ["int8", "fp32"])
def test_commitment_is_the_all_reduce_packet_and_costs_what_it_costs(
    corpus_dir: Path, fmt: str
) -> None:
    model = GPT(SMALL)
    diloco = DiLoCo(model, OuterState.from_model(model))
    diloco.train_local(_rows(corpus_dir, 3), _settings(fmt))
    packet = diloco.local_packet(fmt)
    flat_pg = diloco.state.pseudo_gradient(model)
    # fused subtract-and-quantize == quantize(base - local)
    assert torch.equal(decode(packet), decode(encode(flat_pg, None, fmt)))
    data = commitment.blob(packet)
    n = model.num_params()
    assert len(data) <= wire_bytes(n, fmt) + 512  # the packet plus a safetensors header
    assert bytes(blob_id(data, max_bytes=1 << 30)) == commitment.commitment_hash(packet)
    tensors = decode_blob(data, max_bytes=1 << 30)
    assert commitment.is_commitment(tensors)
    assert torch.equal(commitment.decoded(tensors), decode(packet))
    # the audit replays the weighted average from the members' committed packets
    replay = simulate_average([commitment.packet_of(tensors)] * 2, fmt, weights=[3, 1])
    assert torch.allclose(replay, decode(packet), atol=1e-6)


def test_a_malformed_commitment_is_refused() -> None:
    packet = encode(torch.randn(1000), None, "int8")
    tensors = commitment.tensors_of(packet)
    bad_meta = dict(tensors, meta=torch.tensor([2, 5000, 256], dtype=torch.int64))
    with pytest.raises(EncodingError, match="commitment blob"):
        commitment.packet_of(bad_meta)
    with pytest.raises(EncodingError, match="meta"):
        commitment.packet_of({"payload": tensors["payload"]})


def _settings(fmt: str):  # type: ignore[no-untyped-def]
    from reference.outer import OuterConfig
    from trainer.round.diloco import RoundSettings

    return RoundSettings(InnerConfig(steps=3, lr=1e-3, batch_size=4), OuterConfig(), fmt)


def test_the_ledger_scores_a_commitment_decoded() -> None:
    """The ledger decodes commitments before judging them: a zero pseudo-gradient in int8 is
    still zero work (its scales and meta are not), an honest one decodes to the trainer's values
    laid out by the model's shapes, and a blob of the wrong size is refused with its reason."""
    from ledger.judge.pseudo_gradients import decode_pseudo_gradient
    from ledger.judge.tensors import integrity

    honest = commitment.tensors_of(encode(torch.randn(3000), None, "int8"))
    zero = commitment.tensors_of(encode(torch.zeros(3000), None, "int8"))
    model = {"a": torch.zeros(20, 100), "b": torch.zeros(1000)}
    # without decoding, the zero commitment's meta/scales would look like work
    assert integrity(zero, None) is None
    tensors, packet, why = decode_pseudo_gradient(zero, model)
    assert why is None and packet is not None
    assert integrity(tensors, model) == ("zero_update", "pseudo-gradient is zero: no useful work")
    tensors, _, why = decode_pseudo_gradient(honest, model)
    assert why is None and integrity(tensors, model) is None
    flat = torch.cat([tensors["a"].reshape(-1), tensors["b"]])
    assert torch.equal(flat, commitment.decoded(honest))
    _, _, why = decode_pseudo_gradient(honest, {"a": torch.zeros(10)})
    assert why is not None and "3000 values" in why
    shapes = {"b": torch.Size([1000]), "a": torch.Size([20, 100])}
    views = commitment.named(commitment.as_flat(honest), shapes)
    assert {n: v.shape for n, v in views.items()} == shapes
    assert torch.equal(torch.cat([views["a"].reshape(-1), views["b"]]), commitment.decoded(honest))
