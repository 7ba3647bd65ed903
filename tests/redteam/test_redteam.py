"""Cheating nodes in a real network: every node its own process running
trainer.round.node.NodeRunner (real gloo all-reduces, signed joins and attestations) against anvil
and the ledger served over HTTP. Each strategy earns nothing, no honest node is penalised, and the
cheater's receipts say which check refused it and why. A quick subset always runs; all 21
strategies are what ``python
-m bench.redteam`` measures (slow here). The in-process network (tests/redteam/network.py) stays
for the usefulness/audit interplay and the slash path."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.redteam.cheats import NAMES
from bench.redteam.config import NetConfig
from bench.redteam.realnet import RealNet, run
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from tests.redteam.network import Network
from tests.redteam.sim import run as run_sim

pytestmark = [pytest.mark.anvil]

# one of each kind: through the all-reduce (a copy), a dishonest attestation (a hijacked
# checkpoint, equivocation), outside the collective (a takeover without a join), and the two
# disguised ones only an audit catches: with the carried AdamW (the default) the fingerprints of
# ledger.judge.steps do not reliably send them to the replay (other_data escaped a fresh-clone
# run, 193 of 193 most-moved coordinates agreeing; docs/trainer.md), so this network audits
# every node-round and the test holds the audit's verdicts and receipts, not the draw's luck
QUICK = ["copy_exact", "checkpoint_hijack", "round_takeover", "equivocation", "other_data",
         "half_steps_scaled_up"]  # fmt: skip


@pytest.fixture
def real_net(chain: AnvilProcess, deployment: Deployment, tmp_path: Path) -> Iterator[RealNet]:
    dep_path = tmp_path / "deployment.json"
    deployment.save(dep_path)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    net = RealNet(chain, deployment, dep_path, tmp_path, NetConfig(audit_fraction=1.0))
    with net.running():
        yield net


def _check(out: dict[str, Any], names: list[str]) -> None:
    assert out["strategies"] == len(names), out
    assert out["honest_penalised"] == 0, out
    for name in names:
        got = out["per_strategy"][name]
        assert got["caught"], (name, got)
        assert got["earnings_ratio"] <= 0.01, (name, got)


def test_real_cheating_nodes_earn_nothing_and_their_receipts_say_why(real_net: RealNet) -> None:
    out = run(real_net, QUICK, timeout=600)
    _check(out, QUICK)
    assert out["honest_node_rounds"] == 4 * out["rounds"]
    per = out["per_strategy"]
    assert per["copy_exact"]["why"].startswith("[copy]"), per
    assert per["checkpoint_hijack"]["why"].startswith("[result_mismatch]"), per
    assert per["equivocation"]["why"].startswith("[equivocation]"), per
    assert "not_a_member" in per["round_takeover"]["why"], per  # refused at intake
    assert per["other_data"]["why"].startswith("[audit_failed]"), per
    # the segment audit fails it: on a replayed segment, or for not serving a boundary in time
    audit_fails = ("[audit_failed]", "[boundary_withheld]")
    assert per["half_steps_scaled_up"]["why"].startswith(audit_fails), per
    # the copier's receipts (GET /v1/rewards/{payout}): the attack round pays 0, with the check
    # that refused it and its evidence (whose update it repeats), and its honest rounds are paid
    copier = out["attackers"]["copy_exact"]
    (attack,) = copier["rounds"]
    receipts = real_net.http.get(f"/v1/rewards/{copier['payout']}").json()["receipts"]
    by_round = {int(r["round"]): r for r in receipts}
    assert by_round[attack]["reward"] == "0", by_round[attack]
    assert by_round[attack]["reason"].startswith("[copy] pseudo-gradient repeats node 0x")
    assert "residual cosine" in by_round[attack]["reason"]
    attacks = {x for a in out["attackers"].values() if a["address"] == copier["address"]
               for x in a["rounds"]}  # fmt: skip
    assert all(int(r["reward"]) > 0 for n, r in by_round.items() if n not in attacks), by_round
    # the round view tells the same (per round receipts)
    view = real_net.http.get(f"/v1/runs/{real_net.run_id}/rounds/{attack}").json()
    (score,) = [s for s in view["scores"] if s["node"] == copier["address"]]
    assert score["reward"] == "0" and score["reason"] == by_round[attack]["reason"]


@pytest.mark.slow
def test_all_strategies_against_real_nodes(real_net: RealNet) -> None:
    out = run(real_net, NAMES, timeout=1500)
    assert out["strategies"] == len(NAMES) >= 21
    assert out["honest_penalised"] == 0, out["honest_penalties"]


def test_honest_work_that_raises_the_loss_is_replayed_and_paid(
    overshooting_network: Network,
) -> None:
    """Usefulness <= 0 does not reject by itself: the replay tells honest work (paid at the
    usefulness floor) from noise (audit failed). Without this, every honest node-round here is
    rejected as ``usefulness``."""
    net = overshooting_network
    out = run_sim(net, extra_honest_rounds=0, only=["gaussian_noise"])
    assert out["caught"] == 1 and out["honest_penalised"] == 0, out
    honest = [n for n in net.nodes if n.strategy.name == "honest"]
    first = net.logs[1].scores  # from genesis every honest update raises its own-shard loss
    for node in honest:
        s = first[node.address]
        assert "did not lower its own-shard loss" in s["reason"], s
        assert "audited" in s["reason"] and s["quality"] == 0.25 and int(s["reward"]) > 0, s
