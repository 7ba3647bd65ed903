"""The in-process red team's node (tests/redteam/node.py) runs the protocol's inner mode as the
real node does (trainer.round.diloco ``DiLoCo.inner_trainer``, ``NodeRunner.adopt``): with
reference.inner.CARRY_STATE it keeps one inner AdamW across the rounds whose committed result it
computed, commits its moments in each round's boundary 0, and passes the ledger's carried replay;
a node that sat a round out starts its next one with a fresh state. Every strategy of
tests/redteam/strategies.py still earns nothing (slow: every strategy's round)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import reference.inner
from bench.redteam.config import NetConfig
from protocol.blobs import decode_blob
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from tests.redteam.conftest import _network
from tests.redteam.network import Network
from tests.redteam.node import Node
from tests.redteam.sim import run
from tests.redteam.strategies import ALL, SimStrategy

pytestmark = [pytest.mark.anvil]


@pytest.fixture
def audited_network(
    chain: AnvilProcess, deployment: Deployment, tmp_path: Path
) -> Iterator[Network]:
    """Every node-round audited (one segment drawn, the ledger's default)."""
    with _network(chain, deployment, tmp_path, NetConfig(audit_fraction=1.0)) as net:
        yield net


def _boundary(node: Node, r: int, index: int) -> dict[str, torch.Tensor]:
    """Boundary ``index`` (-1: the last) of the node's round ``r``, as it serves it."""
    if index < 0:
        index += len(node.boundaries.trace(r).boundaries)
    served = node.boundaries.serve(r, index)
    return decode_blob(served.blob, max_bytes=len(served.blob))


def _moments(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {n: t for n, t in state.items() if n.startswith("adam/")}


def test_honest_nodes_carry_their_inner_adamw_and_pass_the_audit(
    audited_network: Network,
) -> None:
    net = audited_network
    assert reference.inner.CARRY_STATE, "this test is about the carried inner state"
    a, b, c = (net.add_node(label=f"honest{i}") for i in range(3))
    net.play_round(1, [a, b, c])
    net.play_round(2, [a, b])  # c sits round 2 out
    net.play_round(3, [a, b, c])
    for rl in net.logs.values():
        assert rl.state == "committed", rl
        for s in rl.scores.values():
            assert s["verified"] and int(s["reward"]) > 0, s
            assert "audited (" in s["reason"] and "segment replay matches" in s["reason"], s
    steps = net.cfg.inner_steps
    for r in (2, 3):  # a and b start round r from the moments their round r-1 left
        for node in (a, b):
            start, before = _boundary(node, r, 0), _boundary(node, r - 1, -1)
            assert float(start["adam/step"]) == steps * (r - 1), (node.label, r)
            moments = _moments(start)
            assert moments.keys() == _moments(before).keys() and len(moments) > 1
            assert all(torch.equal(t, before[n]) for n, t in moments.items()), (node.label, r)
    assert not _moments(_boundary(c, 3, 0)), "a node back from a round it sat out starts fresh"
    assert float(_boundary(c, 3, -1)["adam/step"]) == steps


class ForgedMoments(SimStrategy):
    """Trains every step honestly, but from AdamW moments it chose: its carried exp_avg x 4 (a
    push along its own momentum), or, with nothing carried, moments made up from nothing. Every
    segment replays from the committed boundary 0, so only the continuity check can tell."""

    name = "forged_moments"

    def __init__(self, *, from_nothing: bool = False) -> None:
        self.from_nothing = from_nothing

    def carried_moments(self, optimizer: torch.optim.Optimizer) -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                held = optimizer.state.get(p)
                if held:
                    held["exp_avg"].mul_(4.0)
                    continue
                if not self.from_nothing:
                    continue
                optimizer.state[p] = {
                    "step": torch.tensor(40.0),
                    "exp_avg": torch.full_like(p, 1e-3),
                    "exp_avg_sq": torch.full_like(p, 1e-6),
                }


def test_moments_a_node_did_not_train_to_fail_the_audit(audited_network: Network) -> None:
    """Boundary 0 of a carried round must hold a fresh AdamW or the node's round r-1's last
    (ledger.judge.continuity): the forger's round 2 (its round 1's moments x 4) and a newcomer's
    first round (moments from nothing) fail, whatever segment was drawn; the honest nodes pass."""
    net = audited_network
    assert reference.inner.CARRY_STATE, "this test is about the carried inner state"
    a, b, c = (net.add_node(label=f"honest{i}") for i in range(3))
    forger = net.add_node(ForgedMoments(), label="forger")
    net.play_round(1, [a, b, c, forger])  # nothing carried yet: the forger makes nothing up
    newcomer = net.add_node(ForgedMoments(from_nothing=True), label="newcomer")
    net.play_round(2, [a, b, c, forger, newcomer])
    one, two = net.logs[1], net.logs[2]
    assert one.scores[forger.address]["verified"], one.scores[forger.address]
    forged = two.scores[forger.address]
    assert not forged["verified"] and int(forged["reward"]) == 0, forged["reason"]
    assert "neither fresh nor the one the node's round 1 ended with" in forged["reason"], forged
    new = two.scores[newcomer.address]
    assert not new["verified"] and int(new["reward"]) == 0, new["reason"]
    assert "attested no traced round 1" in new["reason"], new
    for node in (a, b, c):
        s = two.scores[node.address]
        assert s["verified"] and int(s["reward"]) > 0, s
        assert "carries round 1's AdamW state" in s["reason"], s


@pytest.mark.slow  # ~2.5 min here: one round per strategy of the in-process network
def test_every_in_process_strategy_is_caught_with_the_carried_inner_state(
    network: Network,
) -> None:
    out = run(network, extra_honest_rounds=0)
    assert out["strategies"] == len(ALL) and out["honest_penalised"] == 0, out
    missed = {name: v for name, v in out["per_strategy"].items() if not v["caught"]}
    assert not missed, missed
