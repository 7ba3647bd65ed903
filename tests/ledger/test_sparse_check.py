"""The sparse round audited exactly: a node's real rounds (trainer.round.diloco, its boundary store)
commit the error-feedback residual in boundary 0, and the ledger recomputes the signed packet bit
for bit from the served boundaries (ledger.judge.sparse_check); a node that lies about its packet
or its residual is caught."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import torch
from sqlmodel import Session

from ledger.core import db
from ledger.core.blobstore import BlobStore
from ledger.core.models import Attestation, BoundaryRequest, utcnow
from ledger.judge.entries import Entry
from ledger.judge.sparse_check import check_sparse_round, needed, sparse_round
from protocol.blobs import decode_blob, encode_blob
from protocol.hashing import hash_state_dict
from reference.codec import Packet, encode
from reference.codec.sparse import encode_feedback
from reference.model import GPT, GPTConfig
from reference.outer import FlatLayout, OuterState
from reference.trace import RESIDUAL, residual_entries, residual_of, state_hash
from trainer.network.comm import SoloAverager
from trainer.round.boundaries import BoundaryStore
from trainer.round.diloco import DiLoCo, LocalWork
from trainer.round.runconfig import RunConfig

SMALL = GPTConfig(n_layer=1, n_head=2, d_model=16, seq_len=8)
Tensors = dict[str, torch.Tensor]
BASES: dict[int, Tensors] = {}
"""The attested base of each round of :func:`rounds` (its lockstep node's)."""


def _served(store: BoundaryStore, r: int, index: int) -> Tensors:
    """Boundary ``index`` of round ``r`` as the ledger receives it: the served blob."""
    blob = store.serve(r, index).blob
    return dict(decode_blob(blob, max_bytes=len(blob)))


@pytest.fixture(scope="module")
def rounds(tmp_path_factory: pytest.TempPathFactory) -> tuple[BoundaryStore, list[LocalWork]]:
    """Three sparse rounds of one node (4 inner steps, boundaries every 2), each starting from
    the residual the last one left, as trainer.round.node carries it."""
    store = BoundaryStore(tmp_path_factory.mktemp("node"))
    model = GPT(SMALL, seed=3)
    diloco = DiLoCo(model, OuterState.from_model(model))
    settings = RunConfig.make(inner_steps=4, batch_size=2, trace_interval=2,
                              wire_format="sparse").settings  # fmt: skip
    gen = torch.Generator().manual_seed(4)
    works: list[LocalWork] = []
    residual = None
    for r in (1, 2, 3):
        BASES[r] = diloco.state.layout.unflatten(diloco.state.base.clone())
        rows = torch.randint(0, 256, (8, SMALL.seq_len + 1), generator=gen)
        local = diloco.train_local(rows, settings, residual=residual, keep=store.keeper(r))
        assert local.trace is not None and local.packet is not None
        store.finish(r, local.trace)
        diloco.finish_round(local, SoloAverager(), settings)
        works.append(local)
        residual = local.residual
    store.close()
    return store, works


def test_boundary_zero_commits_the_residual_the_round_starts_from(
    rounds: tuple[BoundaryStore, list[LocalWork]],
) -> None:
    store, works = rounds
    layout = FlatLayout({n: p.shape for n, p in GPT(SMALL).named_parameters()})
    first = residual_of(_served(store, 1, 0), layout)
    assert first is not None and not bool(first.any()), "round 1 starts from a zero residual"
    second = residual_of(_served(store, 2, 0), layout)
    assert works[0].residual is not None and second is not None
    assert torch.equal(second, works[0].residual) and bool(second.any())
    assert not any(n.startswith(RESIDUAL) for n in _served(store, 2, 1)), "boundary 0 only"
    assert needed(2, 4, 2) == [(2, 0), (2, 2), (3, 0)]


def test_an_honest_sparse_round_is_recomputed_bit_for_bit(
    rounds: tuple[BoundaryStore, list[LocalWork]],
) -> None:
    store, works = rounds
    for r in (1, 2):
        packet = works[r - 1].packet
        assert packet is not None
        verdict = check_sparse_round(packet, _served(store, r, 0), _served(store, r, 2),
                                     _served(store, r + 1, 0))  # fmt: skip
        assert verdict.passed, verdict.reason
    last = works[2].packet
    assert last is not None
    alone = check_sparse_round(last, _served(store, 3, 0), _served(store, 3, 2))
    assert alone.passed and "not checked yet" in alone.reason


def _flipped(packet: Packet) -> Packet:
    payload = packet.payload.clone()
    payload[-1] ^= 0x01  # one code bit of the last chunk: offsets stay valid
    return replace(packet, payload=payload)


def test_a_node_that_lies_about_its_packet_is_caught(
    rounds: tuple[BoundaryStore, list[LocalWork]],
) -> None:
    store, works = rounds
    packet = works[1].packet
    assert packet is not None
    verdict = check_sparse_round(_flipped(packet), _served(store, 2, 0), _served(store, 2, 2))
    assert not verdict.passed and "differs from the signed packet" in verdict.reason
    assert packet.scales is not None
    louder = replace(packet, scales=packet.scales * 2)  # the same codes, every step doubled
    verdict = check_sparse_round(louder, _served(store, 2, 0), _served(store, 2, 2))
    assert not verdict.passed and "steps differ" in verdict.reason


def test_a_node_that_lies_about_its_residual_is_caught(
    rounds: tuple[BoundaryStore, list[LocalWork]],
) -> None:
    store, works = rounds
    layout = FlatLayout({n: p.shape for n, p in GPT(SMALL).named_parameters()})
    start, end, after = _served(store, 2, 0), _served(store, 2, 2), _served(store, 3, 0)
    packet = works[1].packet
    assert packet is not None and works[1].residual is not None
    # it commits a zero residual but sent the packet of its real one (mass from nowhere)
    hidden = {**start, **residual_entries(None, layout)}
    verdict = check_sparse_round(packet, hidden, end, after)
    assert not verdict.passed and "differs from the signed packet" in verdict.reason
    # it carries more than its packet left into the next round (mass it never sent)
    inflated = {**after, **residual_entries(works[1].residual * 2, layout)}
    verdict = check_sparse_round(packet, start, end, inflated)
    assert not verdict.passed and "mass the node never sent" in verdict.reason
    assert state_hash(inflated) != state_hash(after), "the lie is a different commitment"
    # a zero residual in the next round is a reset (a rejoin starts afresh): not a lie
    reset = {**after, **residual_entries(None, layout)}
    assert check_sparse_round(packet, start, end, reset).passed
    # a boundary 0 without a residual cannot be checked: it fails
    bare = {n: t for n, t in start.items() if not n.startswith(RESIDUAL)}
    verdict = check_sparse_round(packet, bare, end, after)
    assert not verdict.passed and "commits no error-feedback residual" in verdict.reason


def test_the_packet_is_a_function_of_the_committed_weights(
    rounds: tuple[BoundaryStore, list[LocalWork]],
) -> None:
    """A node that trained other weights than it committed (its packet from a different end
    state) is caught, however small the difference: the check has no tolerance."""
    store, works = rounds
    layout = FlatLayout({n: p.shape for n, p in GPT(SMALL).named_parameters()})
    start, end = _served(store, 2, 0), _served(store, 2, 2)
    origin = layout.flatten({n.removeprefix("weights/"): t for n, t in start.items()
                             if n.startswith("weights/")})  # fmt: skip
    local = layout.flatten({n.removeprefix("weights/"): t for n, t in end.items()
                            if n.startswith("weights/")})  # fmt: skip
    other, _ = encode_feedback(origin, local * 1.01, works[0].residual)
    verdict = check_sparse_round(other, start, end)
    assert not verdict.passed, verdict.reason


def test_a_packet_that_is_not_sparse_is_refused(
    rounds: tuple[BoundaryStore, list[LocalWork]],
) -> None:
    store, works = rounds
    assert works[1].pseudo_gradient is not None
    dense = encode(torch.zeros_like(works[1].pseudo_gradient), works[1].pseudo_gradient, "int8")
    verdict = check_sparse_round(dense, _served(store, 2, 0), _served(store, 2, 2))
    assert not verdict.passed and "not sparse" in verdict.reason


def _judged(
    tmp: Path,
    store: BoundaryStore,
    works: list[LocalWork],
    *,
    lie: bool,
    round_: int = 2,
    base: Tensors | None = None,
    previous: Tensors | None = None,
    previous_delivered: bool = True,
) -> Entry:
    """Round ``round_`` (default 2) of the node judged by :func:`sparse_round` on a real
    database and blob store, from the boundaries the node delivered (the ``BoundaryRequest``
    rows of an audit) against its attested ``base`` (default the lockstep round's);
    ``previous``: round r-1's attested base, whose attestation row (and, if
    ``previous_delivered``, boundaries 0 and last) are then in the ledger too (an overlapped
    start's origin check)."""
    tmp.mkdir(parents=True)
    engine = db.make_engine(f"sqlite:///{tmp / 'ledger.db'}")
    db.create_all(engine)
    blobs = BlobStore(tmp / "blobs", engine, max_bytes=1 << 30)
    run, node = "0x" + "ab" * 32, "0x" + "cd" * 20
    att = SimpleNamespace(run_id=run, node=node, inner_steps=4, digest="0x01", signature="0x02",
                          pseudo_gradient="0x03", trace_root="0x04")  # fmt: skip
    wanted = [w for w in needed(round_, 4, 2) if w[0] in store.rounds()]
    with Session(engine) as session:
        if previous is not None:
            blob = encode_blob(previous)
            base_hex = "0x" + hash_state_dict(previous).hex()
            blobs.put(base_hex, blob)
            session.add(Attestation(
                run_id=run, round=round_ - 1, node=node, config_version=1,
                base_checkpoint=base_hex, pseudo_gradient="0x" + "03" * 32,
                data_shard="0x" + "05" * 32, inner_steps=4, tokens=64,
                result_checkpoint="0x" + "06" * 32, trace_root="0x" + "07" * 32,
                digest="0x" + "08" * 32, signature="0x09",
            ))  # fmt: skip
            wanted += [(round_ - 1, 0), (round_ - 1, 2)] if previous_delivered else []
        for r, index in wanted:
            served = store.serve(r, index)
            state_hex = "0x" + served.boundary.state_hash.hex()
            blobs.put(state_hex, served.blob)
            session.add(BoundaryRequest(
                run_id=run, round=r, node=node, boundary=index, trace_root="0x" + served.root.hex(),
                deadline=utcnow(), state="delivered", state_hash=state_hex,
            ))  # fmt: skip
        session.commit()
        entry = Entry(cast(Any, att))
        packet = works[round_ - 1].packet
        assert packet is not None
        entry.packet = _flipped(packet) if lie else packet
        config = SimpleNamespace(trace_interval=2)  # every round's (round r-1's too)
        ctx = SimpleNamespace(blobs=blobs, config=config, config_of=lambda _att: config)
        rnd = SimpleNamespace(run_id=run, round=round_)
        sparse_round(session, entry, cast(Any, ctx), cast(Any, rnd),
                     BASES[round_] if base is None else base)  # fmt: skip
    engine.dispose()
    return entry


def test_the_judge_checks_a_sparse_round_from_the_delivered_boundaries(
    rounds: tuple[BoundaryStore, list[LocalWork]], tmp_path: Path
) -> None:
    store, works = rounds
    honest = _judged(tmp_path / "honest", store, works, lie=False)
    assert honest.ok and "recomputed bit for bit" in honest.reason, honest.reason
    liar = _judged(tmp_path / "liar", store, works, lie=True)
    assert liar.check == "sparse_packet" and liar.fraud is not None, liar.reason
    assert "differs from the signed packet" in liar.reason


Overlapped = dict[str, tuple[BoundaryStore, list[LocalWork]]]


@pytest.fixture(scope="module")
def overlapped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Overlapped, dict[str, Tensors]]:
    """Two sparse nodes on the overlap schedule's arithmetic (trainer.round.overlap), each with
    its own boundary store: round 1 from the base; round 2, while round 1 is in flight, with
    the residual round 1 left, from the base less round 1's progress ("honest") or less twice
    that progress ("cheat": a made-up origin, its trace consistent with it). Then round 1
    lands: round 2's attested base."""
    model = GPT(SMALL, seed=3)
    diloco = DiLoCo(model, OuterState.from_model(model))
    settings = RunConfig.make(inner_steps=4, batch_size=2, trace_interval=2,
                              wire_format="sparse").settings  # fmt: skip
    gen = torch.Generator().manual_seed(5)
    rows = [torch.randint(0, 256, (8, SMALL.seq_len + 1), generator=gen) for _ in range(2)]
    layout = diloco.state.layout
    bases = {"round1": layout.unflatten(diloco.state.base.clone())}
    nodes: Overlapped = {}
    for name, times in (("honest", 1), ("cheat", 2)):
        store = BoundaryStore(tmp_path_factory.mktemp(name))
        w1 = diloco.train_local(rows[0], settings, keep=store.keeper(1))  # the same round 1
        assert w1.trace is not None
        store.finish(1, w1.trace)
        start = diloco.state.base - times * w1.pseudo_gradient
        w2 = diloco.train_local(rows[1], settings, start=start, residual=w1.residual,
                                keep=store.keeper(2))  # fmt: skip
        assert w2.trace is not None
        store.finish(2, w2.trace)
        store.close()
        nodes[name] = (store, [w1, w2])
    diloco.finish_round(nodes["honest"][1][0], SoloAverager(), settings)
    bases["round2"] = layout.unflatten(diloco.state.base.clone())
    return nodes, bases


def test_an_overlapped_sparse_round_passes_from_its_public_origin(
    overlapped: tuple[Overlapped, dict[str, Tensors]], tmp_path: Path
) -> None:
    """Round 2's packet is recomputed from boundary 0 (its origin), which is round 1's base
    less round 1's committed progress: the origin rule passes it. Without round 1's delivered
    boundaries the judge cannot tell, and says it did not audit the round; a node with no
    round 1 attested had no progress to start from, and fails."""
    nodes, bases = overlapped
    store, works = nodes["honest"]
    honest = _judged(tmp_path / "honest", store, works, lie=False, base=bases["round2"],
                     previous=bases["round1"])  # fmt: skip
    assert honest.ok and "recomputed bit for bit" in honest.reason, honest.reason
    assert "origin: the round started from the last round's base" in honest.reason
    blind = _judged(tmp_path / "blind", store, works, lie=False, base=bases["round2"],
                    previous=bases["round1"], previous_delivered=False)  # fmt: skip
    assert blind.ok and "not audited: a sparse round that did not start from its base" in \
        blind.reason, blind.reason  # fmt: skip
    alone = _judged(tmp_path / "alone", store, works, lie=False, base=bases["round2"])
    assert alone.check == "audit_failed", alone.reason  # no round 1 it could start from
    assert "attested no traced round 1" in alone.reason, alone.reason


def test_a_sparse_round_from_a_made_up_origin_fails(
    overlapped: tuple[Overlapped, dict[str, Tensors]], tmp_path: Path
) -> None:
    """The made-up start's packet is its committed state's (rule 1 alone passes it); the
    origin rule fails it with a fraud record."""
    nodes, bases = overlapped
    store, works = nodes["cheat"]
    assert works[1].packet is not None
    assert check_sparse_round(works[1].packet, _served(store, 2, 0), _served(store, 2, 2)).passed
    cheat = _judged(tmp_path / "cheat", store, works, lie=False, base=bases["round2"],
                    previous=bases["round1"])  # fmt: skip
    assert cheat.check == "audit_failed" and cheat.fraud is not None, cheat.reason
    assert "neither its attested base" in cheat.reason, cheat.reason
