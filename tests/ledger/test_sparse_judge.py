"""The ledger on sparse packets: the outer step and the decode are the nodes' bits, and a copy is
found by the positions two packets keep."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import torch

from ledger.judge.comparisons import check_index_overlap
from ledger.judge.entries import Entry
from ledger.judge.outer_step import outer_step
from ledger.judge.pseudo_gradients import decode_pseudo_gradient, load_pseudo_gradients
from reference.codec import Packet, encode
from reference.codec.sparse import encode_feedback, index_overlap
from reference.commitment import packet_of, tensors_of
from reference.mean import sparse_mean
from reference.outer import FlatLayout, OuterConfig, OuterState

SHAPES = {"a.weight": torch.Size([64, 48]), "b.bias": torch.Size([300])}


def _update(seed: int) -> torch.Tensor:
    numel = sum(s.numel() for s in SHAPES.values())
    return torch.randn(numel, generator=torch.Generator().manual_seed(seed)) * 1e-3


def _packet(update: torch.Tensor) -> Packet:
    packet, _ = encode_feedback(update, torch.zeros_like(update), None)
    return packet


def test_the_ledger_steps_and_decodes_sparse_commitments_with_the_nodes_bits() -> None:
    layout = FlatLayout(SHAPES)
    base = layout.unflatten(_update(99) * 1000)
    packets = [packet_of(tensors_of(_packet(_update(s)))) for s in range(3)]  # via the blob
    tokens = [1000, 2000, 1500]
    res = outer_step(base, None, packets, lr=0.7, mu=0.9, wire_format="sparse", weights=tokens)
    node = OuterState(layout, layout.flatten(base), None)
    node.step(sparse_mean(packets, tokens), OuterConfig(lr=0.7, momentum=0.9))
    for name, t in node.weights().items():
        assert torch.equal(res.weights[name], t), name
    tensors, packet, why = decode_pseudo_gradient(tensors_of(packets[0]), base)
    assert why is None and packet is not None and packet.fmt.label == "sparse"
    assert set(tensors) == set(SHAPES)
    kept = layout.flatten(dict(tensors))
    assert int((kept != 0).sum()) <= packets[0].sparse().positions().numel()


def _entries(packets: list[Packet]) -> list[Entry]:
    out = []
    for i, p in enumerate(packets):
        e = Entry(cast(Any, SimpleNamespace(id=i + 1, node=f"0xnode{i}")))
        e.packet = p
        out.append(e)
    return out


def _ctx(audit: float) -> Any:
    settings = SimpleNamespace(copy_index_overlap=0.25, audit_fraction=audit)
    return SimpleNamespace(settings=settings)


def test_a_copied_update_is_found_by_the_positions_its_packet_keeps() -> None:
    shared = _update(7)  # what honest nodes of a round have in common
    honest = [_packet(shared * 0.3 + _update(s)) for s in range(3)]
    assert max(index_overlap(a.sparse(), b.sparse()) for a in honest for b in honest
               if a is not b) < 0.25  # fmt: skip
    copier = _packet(shared * 0.3 + _update(0) + 0.5 * _update(50))  # node 0's, plus noise
    entries = _entries([*honest, copier])
    check_index_overlap(entries, _ctx(audit=0.0))
    assert [e.check for e in entries] == [None, None, None, "copy"], [e.reason for e in entries]
    assert "0xnode0" in entries[3].reason
    audited = _entries([*honest, copier])
    check_index_overlap(audited, _ctx(audit=0.1))  # the replay decides: suspicious only
    assert all(e.ok for e in audited)
    assert audited[0].suspicious and audited[3].suspicious and not audited[1].suspicious


def test_a_commitment_in_the_other_kind_of_format_is_refused_by_name() -> None:
    """A dense packet in a sparse round (or the reverse) cannot enter the members' mean."""
    layout = FlatLayout(SHAPES)
    base = layout.unflatten(_update(99))
    blobs = {"0xsparse": tensors_of(_packet(_update(1))),
             "0xint8": tensors_of(encode(_update(2), None, "int8"))}  # fmt: skip
    for governed, bad in (("sparse", "0xint8"), ("int8", "0xsparse")):
        entries = [Entry(cast(Any, SimpleNamespace(id=i, node=f"0x{i}", pseudo_gradient=h)))
                   for i, h in enumerate(blobs)]  # fmt: skip
        ctx = SimpleNamespace(blobs=SimpleNamespace(tensors=blobs.get),
                              config=SimpleNamespace(wire_format=governed))  # fmt: skip
        load_pseudo_gradients(entries, cast(Any, ctx), base)
        failed = {e.att.pseudo_gradient: e.reason for e in entries if not e.ok}
        assert list(failed) == [bad], failed
        assert f"round's wire format is {governed}" in failed[bad]
