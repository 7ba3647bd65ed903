"""Nodes of several local ranks in real gloo processes (FSDP2 inside each node), checked
against single-process nodes replayed from the run's records (bench.fsdp)."""

from __future__ import annotations

import pytest

from bench.fsdp import INNER_TOLERANCE, Spec, run_nodes

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]


def _assert_exact(found: dict[str, object]) -> None:
    assert found["outer_equal"], "outer step or checkpoint differs from the single-process one"
    assert found["packets_equal"], "a packet differs from a single-process node's encoding"
    assert found["same_base"], "nodes ended a round on different bases (or lost a member)"
    assert found["trace_same"], "the trace's start state or boundary count differs"
    assert isinstance(found["inner_rel_err"], float)
    assert found["inner_rel_err"] <= INNER_TOLERANCE


def test_two_nodes_of_two_ranks_match_single_process_nodes_over_three_rounds() -> None:
    _assert_exact(run_nodes(Spec(rounds=3), [2, 2]))


@pytest.mark.slow
def test_nodes_of_one_two_and_four_ranks_train_one_run() -> None:
    _assert_exact(run_nodes(Spec(rounds=3), [1, 2, 4]))
