"""Cheating nodes in a real network (anvil, the ledger, honest nodes): each strategy earns nothing
and no honest node is penalised. A quick subset always runs; all 21 strategies are slow (and are
what ``python -m bench.redteam`` measures)."""

from __future__ import annotations

import pytest

from bench.redteam import run
from tests.redteam.network import Network
from tests.redteam.strategies import ALL

pytestmark = [pytest.mark.anvil]

QUICK = ["checkpoint_hijack", "round_takeover", "equivocation", "copy_exact", "inflated_tokens"]


def _check(out: dict, names: list[str]) -> None:
    assert out["strategies"] == len(names), out
    assert out["honest_penalised"] == 0, out
    for name in names:
        got = out["per_strategy"][name]
        assert got["caught"], (name, got)
        assert got["earnings_ratio"] <= 0.01, (name, got)


# Was flaky (2 runs in 21): an honest node whose 8 AdamW steps happened to raise the loss on its own
# rows was rejected as `usefulness` (own-shard loss 3.1155 -> 3.1560), failing its round's strategy
# too. Usefulness <= 0 now sends the update to the replay audit, which pays honest work at the
# floor (test_honest_work_that_raises_the_loss_is_replayed_and_paid).
def test_quick_subset_is_caught_and_honest_nodes_are_paid(network: Network) -> None:
    out = run(network, extra_honest_rounds=0, only=QUICK)
    _check(out, QUICK)
    # the evidence is public: the audit's fraud record names the copier, with the replay inputs
    frauds = network.client.get("/v1/frauds").json()
    copier = next(n for n in network.nodes if n.strategy.name == "copy_exact")
    (record,) = [f for f in frauds if f["node"] == copier.address]
    assert record["evidence"]["replay_inputs"]["node"] == copier.address
    assert record["evidence"]["relative_error"] > network.ledger.settings.audit_tolerance
    receipts = network.client.get(f"/v1/rewards/{copier.key.payout}").json()["receipts"]
    assert receipts and all(r["reward"] == "0" for r in receipts)
    assert "[audit_failed]" in receipts[-1]["reason"]
    # `coloco audit`, an independent process's logic, replays every paid pair: honest ones match
    from coloco_cli.audit import audit_rounds

    cfg = network.cfg
    verdicts = audit_rounds(
        network.client,
        network.run_id,
        fraction=1.0,
        model="tiny",
        inner_lr=cfg.inner_lr_e6 / 1e6,
        mixture=(10_000,),
        tolerance=1e-3,
    )
    assert len(verdicts) >= 4 * len(network.logs)
    assert all(v["verdict"] == "pass" for v in verdicts), verdicts
    assert max(v["relative_error"] for v in verdicts) <= 1e-3


@pytest.mark.slow
def test_all_strategies_are_caught(network: Network) -> None:
    names = [cls.name for cls in ALL]
    assert len(names) >= 21
    _check(run(network, extra_honest_rounds=0), names)


def test_honest_work_that_raises_the_loss_is_replayed_and_paid(
    overshooting_network: Network,
) -> None:
    """Usefulness <= 0 does not reject by itself: the replay tells honest work (paid at the
    usefulness floor) from noise (audit failed). Without this, every honest node-round here is
    rejected as ``usefulness``."""
    net = overshooting_network
    out = run(net, extra_honest_rounds=0, only=["gaussian_noise"])
    _check(out, ["gaussian_noise"])
    honest = [n for n in net.nodes if n.strategy.name == "honest"]
    first = net.logs[1].scores  # from genesis every honest update raises its own-shard loss
    for node in honest:
        s = first[node.address]
        assert "did not lower its own-shard loss" in s["reason"], s
        assert "audited" in s["reason"] and s["quality"] == 0.25 and int(s["reward"]) > 0, s
