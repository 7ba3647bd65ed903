"""A far-future ``ckpt/latest`` cannot stop a starting node (F9 of issue 25).

``ckpt/latest`` is the hint a starting node reads first. It was accepted from any registered
signer for any round: one signed for round 10^12 made the node wait for that round's checkpoint
until its recovery deadline, then exit 6. Now a reader takes it only from a member of that round's
signed round-open, and, with a chain, only for a round no later than the chain's last committed
round plus ``round_window``; else it starts from the chain's latest committed round. Real
TCPStore, real signed messages, a real anvil chain for the window.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from protocol.chain import ChainClient
from protocol.keys import NodeKey
from reference.model import GPTConfig
from trainer.network.checkpoint_manifest import Manifest
from trainer.network.coordination.registry import StaticRegistry
from trainer.network.membership import MembershipConfig, Rendezvous
from trainer.round.node import offline_domain
from trainer.round.recovery import Recovery

FAR = 10**12
RUN = bytes.fromhex("ab" * 32)
MODEL = GPTConfig(vocab_size=64, seq_len=8, n_layer=1, n_head=1, d_model=8)


def _keys() -> tuple[NodeKey, NodeKey]:
    return NodeKey.from_private_key(b"\x51" * 32), NodeKey.from_private_key(b"\x52" * 32)


def _node(port: int, key: NodeKey, registry: StaticRegistry, domain: Any) -> Rendezvous:
    cfg = MembershipConfig(rendezvous_timeout_s=5.0, join_window_s=0.0)
    return Rendezvous("127.0.0.1", port, key=key, domain=domain, run_id=RUN, registry=registry,
                      cfg=cfg)  # fmt: skip


def _start(recovery: Recovery, joiner: Rendezvous) -> tuple[Any, float]:
    started = time.monotonic()
    try:
        ckpt = recovery.initial(joiner.checkpoints, None)
    except Exception as exc:
        return exc, time.monotonic() - started
    return ckpt, time.monotonic() - started


def test_a_far_future_latest_from_a_non_member_cannot_stop_a_joiner(store_port: int) -> None:
    """F9: a registered node that is no member of round 10^12 signs ``ckpt/latest`` for it; the
    joiner waited its whole recovery deadline (3 s here, 120 s by default) and failed."""
    rogue_key, joiner_key = _keys()
    registry = StaticRegistry({str(rogue_key.address), str(joiner_key.address)})
    domain = offline_domain(RUN)
    rogue = _node(store_port, rogue_key, registry, domain)
    rogue.checkpoints.publish(FAR, 0, 0, bytes(32), {"serve": "127.0.0.1:1"})
    joiner = _node(store_port, joiner_key, registry, domain)
    got, took = _start(Recovery(RUN, MODEL, 0, peer_timeout_s=3.0), joiner)
    assert not isinstance(got, BaseException), f"{got!r} after {took:.1f}s"
    assert got.round == 0 and took < 2.0, (got.round, took)
    assert "not_member" in {r.check for r in joiner.refusals if r.key == "ckpt/latest"}


@pytest.mark.anvil
def test_a_far_future_latest_from_a_self_opened_round_is_bounded_by_the_chain(
    store_port: int, chain: Any, deployment: Any
) -> None:
    """F9: a registered node opens round 10^12 alone (its own signed join and round-open, both
    valid) and signs ``ckpt/latest`` as its only member; the chain's last committed round plus
    the window (3) bounds what a joiner believes: it starts from the chain's latest instead."""
    rogue_key, joiner_key = _keys()
    registry = StaticRegistry({str(rogue_key.address), str(joiner_key.address)})
    client = ChainClient(chain.rpc_url, deployment)
    domain = client.attestation_domain()
    rogue = _node(store_port, rogue_key, registry, domain)
    members = rogue.join(FAR, timeout_s=5.0)
    assert members.addresses == (str(rogue_key.address),), "the rogue's round opened"
    rogue.checkpoints.publish(FAR, 0, 0, bytes(32), {"serve": "127.0.0.1:1"})
    joiner = _node(store_port, joiner_key, registry, domain)
    assert joiner.checkpoints.latest_round() == FAR, "a member of that round signed it"
    got, took = _start(Recovery(RUN, MODEL, 0, chain=client, peer_timeout_s=3.0), joiner)
    assert not isinstance(got, BaseException), f"{got!r} after {took:.1f}s"
    assert got.round == 0 and took < 2.0, (got.round, took)
    assert "future_round" in {r.check for r in joiner.refusals if r.key == "ckpt/latest"}


def test_an_offer_larger_than_the_model_is_refused_before_any_allocation(store_port: int) -> None:
    """F17: a member of the round signs an offer claiming 8 GiB (within the manifest's absolute
    bound) for a model whose checkpoint is a few KB; the joiner allocated ``bytearray(size)``
    and downloaded it before the hash check. The size is now bounded by the model's."""
    member_key, joiner_key = _keys()
    registry = StaticRegistry({str(member_key.address), str(joiner_key.address)})
    domain = offline_domain(RUN)
    member = _node(store_port, member_key, registry, domain)
    member.join(1, timeout_s=5.0)
    weights = bytes(32)
    member.checkpoints.publish(1, 0, 0, weights, {"serve": "127.0.0.1:1", "size": 8 * 1024**3,
                                                  "chunk_bytes": 1 << 26,
                                                  "chunks_root": "11" * 32})  # fmt: skip
    joiner = _node(store_port, joiner_key, registry, domain)
    recovery = Recovery(RUN, MODEL, 0, peer_timeout_s=1.0)
    assert recovery.max_blob_bytes < 2 << 20
    assert recovery._offers(joiner.checkpoints, 1, weights) == [], "the 8 GiB offer was kept"
    refused = [r.detail for r in joiner.refusals if r.key == f"ckpt/1/sig/{member_key.address}"]
    assert refused and "largest checkpoint" in refused[0], joiner.refusals


def test_an_offer_cannot_point_joiners_at_another_host_or_port(store_port: int) -> None:
    """F17: the ``serve`` field of a member's signed offer was taken as it came, so a member could
    send every joiner's requests to any host and port. A joiner now fetches only from the
    endpoint the member announced in its signed join of the round (its ``serve``, announced
    once it served a checkpoint; in its first join, the host of its successor endpoint)."""
    member_key, joiner_key = _keys()
    registry = StaticRegistry({str(member_key.address), str(joiner_key.address)})
    domain = offline_domain(RUN)
    member = _node(store_port, member_key, registry, domain)
    member.own_endpoint = "127.0.0.1:29999"
    joiner = _node(store_port, joiner_key, registry, domain)
    recovery = Recovery(RUN, MODEL, 0, peer_timeout_s=1.0)
    blob = b"x" * 5000
    manifest = Manifest.of(blob, bytes(32), 4096)[0].body()
    member.join(1, timeout_s=5.0)  # announces no serve yet: its successor host bounds round 1
    member.checkpoints.publish(1, 0, 0, bytes(32), manifest | {"serve": "10.9.9.9:80"})
    assert recovery._offers(joiner.checkpoints, 1, bytes(32)) == [], "another host was kept"
    member.checkpoints.publish(1, 0, 0, bytes(32), manifest | {"serve": "127.0.0.1:4001"})
    assert [p for _, p in recovery._offers(joiner.checkpoints, 1, bytes(32))] == [
        {str(member_key.address): "127.0.0.1:4001"}
    ]
    member.join(2, timeout_s=5.0)  # its join of round 2 announces 127.0.0.1:4001
    member.checkpoints.publish(2, 0, 0, bytes(32), manifest | {"serve": "127.0.0.1:22"})
    assert recovery._offers(joiner.checkpoints, 2, bytes(32)) == [], "another port was kept"
    refused = {r.check for r in joiner.refusals if r.key.startswith("ckpt/")}
    assert refused == {"wrong_endpoint"}, joiner.refusals
