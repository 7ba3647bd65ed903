"""The time box of heterogeneous nodes (trainer.round.timebox): budgets from signed paces over a
real TCPStore, the bound on a member that lies about its speed, and two real NodeRunner processes,
one 4x slower or more, where the slow one runs only the steps that fit and declares them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from protocol.coordination import Kind
from reference.inner import InnerResult
from tests.trainer.nodes import Plan, collect, start_nodes
from trainer.network.coordination.board import Board
from trainer.network.coordination.store import FailoverStore
from trainer.round import timebox

H = 8


def _phase(step_s: float, steps: int = H) -> InnerResult:
    return InnerResult(steps=steps, tokens=steps * 128, seconds=step_s * steps)


def test_the_budget_is_h_plus_one_steps_at_the_fastest_pace() -> None:
    assert timebox.budget_from([], H) is None  # nobody posted: no box, H steps
    assert timebox.budget_from([0.3, 0.9], H) == pytest.approx(9 * 0.3)
    assert timebox.budget_from([0.2, 0.21, 0.6], H) == pytest.approx(9 * 0.2)


def test_a_member_claiming_to_be_fast_cuts_the_others_by_at_most_half() -> None:
    honest = [0.30, 0.31, 0.32]
    box = timebox.budget_from([*honest, 1e-9], H)
    assert box is not None
    assert box == pytest.approx(9 * timebox.FLOOR * 0.305)  # half the median, not the lie
    assert box / (9 * min(honest)) >= 0.5


def test_paces_are_read_only_from_their_signers_for_their_round(
    store: FailoverStore, board_of: Callable[[int], Board]
) -> None:
    a, b, rogue = board_of(0x51), board_of(0x52), board_of(0x53)
    reader = board_of(0x54)
    assert timebox.post_pace(a, 4, _phase(0.3)) == pytest.approx(0.3)
    timebox.post_pace(b, 3, _phase(0.1))  # round 3's pace, replayed below as round 4's
    store.set(timebox.pace_key(4, b.address), store.get(timebox.pace_key(3, b.address)))
    # garbage under the rogue's key; its own signed claim goes under a's key below
    rogue_msg = rogue.sign(Kind.PACE, 4, 0, {"step_s": "0.001"}).to_wire()
    store.set(timebox.pace_key(4, rogue.address), b"not a signed message")
    paces = timebox.read_paces(reader, 4, [a.address, b.address, rogue.address])
    assert paces == {a.address: pytest.approx(0.3)}
    checks = {r.check for r in reader.refusals}
    assert "stale" in checks and "unsigned" in checks, reader.refusals
    store.set(timebox.pace_key(4, a.address), rogue_msg)  # the rogue's message under a's key
    assert timebox.read_paces(reader, 4, [a.address]) == {}
    assert "wrong_signer" in {r.check for r in reader.refusals}
    assert timebox.budget(reader, 5, [a.address, b.address], H) is None


@pytest.mark.parametrize("bad", ["-0.1", "0", "nan", "inf", "fast"])
def test_a_pace_that_is_not_a_positive_number_is_refused(
    store: FailoverStore, board_of: Callable[[int], Board], bad: str
) -> None:
    node, reader = board_of(0x55), board_of(0x56)
    node.post(timebox.pace_key(2, node.address), Kind.PACE, 2, 0, {"step_s": bad})
    assert timebox.read_paces(reader, 2, [node.address]) == {}
    assert [r.check for r in reader.refusals] == ["invalid"]


@pytest.mark.distributed
def test_a_slow_node_runs_the_steps_that_fit_and_declares_them(
    tmp_path: Path, corpus_dir: Path, store_port: int
) -> None:
    """Two real nodes with the time box; one sleeps 0.25 s a step (several times the other's
    step on the tiny model). Round 1 has no pace yet: both run H. From round 2 the box is H + 1
    steps at the fast node's pace: the slow node runs fewer steps than the fast one, declares
    them, and both still end every round with the same weights (token-weighted all-reduce)."""
    config = {"inner_steps": H}
    plans = [
        Plan(key=0, rounds=3, min_nodes=2, time_box=True, config=config),
        Plan(key=1, rounds=3, min_nodes=2, time_box=True, config=config, step_sleep_s=0.25),
    ]
    procs, results, manager = start_nodes(plans, store_port, corpus_dir)
    out = collect(procs, results, manager)
    assert out["exit_codes"] == [0, 0]
    fast, slow = out["results"][0], out["results"][1]
    assert [r["round"] for r in fast] == [r["round"] for r in slow] == [1, 2, 3]
    assert fast[0]["inner_steps"] == slow[0]["inner_steps"] == H  # no pace before round 1
    for f, s in zip(fast[1:], slow[1:], strict=True):
        assert s["inner_steps"] < f["inner_steps"], (f, s)
        assert s["inner_steps"] <= H // 2, s
    for rec in fast + slow:
        assert rec["tokens"] == rec["inner_steps"] * 4 * 32  # declared: what it ran
    for f, s in zip(fast, slow, strict=True):
        assert f["result_checkpoint"] == s["result_checkpoint"]
