"""A one-step verdict's evidence (reference.verdict): made from a bisection, stored as blobs,
re-checked in one step by anyone; a blob that is not the one named is refused."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from ledger.core.config import ONE_STEP_TOLERANCE, SEGMENT_TOLERANCE
from protocol.errors import ConfigError
from reference.bisect import bisect_segment
from reference.segment import State
from reference.verdict import Evidence, make_evidence, recheck
from tests.trainer.test_bisect import BATCH, CFG, INNER, K, rows, start, trajectory

__all__ = ["rows", "start"]  # the fixtures


def _verdict(
    start: State, rows: torch.Tensor, cheats: dict[int, str], seg_tol: float = SEGMENT_TOLERANCE
) -> tuple[Evidence, dict[str, dict[str, torch.Tensor]]]:
    states = trajectory(start, rows, cheats)
    result = bisect_segment(states.__getitem__, rows, (0, K), INNER, CFG,
                            segment_tolerance=seg_tol, one_step_tolerance=ONE_STEP_TOLERANCE,
                            threads=1)  # fmt: skip
    batch = rows[result.step * BATCH : (result.step + 1) * BATCH]
    return make_evidence(result, batch, INNER, CFG, run_id="0x" + "AB" * 32, round=3,
                         node="0x" + "2" * 40, segment=(0, K))  # fmt: skip


def test_a_cheat_s_verdict_rechecks_in_one_step(start: State, rows: torch.Tensor) -> None:
    ev, blobs = _verdict(start, rows, {5: "skip"})
    assert ev.step == 5 and not ev.holds
    assert set(blobs) == {ev.before, ev.after, ev.batch}
    again = Evidence.from_json(json.loads(ev.text()))
    assert again == ev and again.hash() == ev.hash()
    assert ev.run_id == "0x" + "ab" * 32
    out = recheck(again, blobs.__getitem__, threads=2)
    assert not out.holds
    assert out.to_json()["verdict"] == "differs" and out.to_json()["agrees_with_ledger"]
    assert out.check.error.weights > 0.5


def test_an_honest_step_holds(start: State, rows: torch.Tensor) -> None:
    ev, blobs = _verdict(start, rows, {}, seg_tol=0.0)
    assert ev.holds
    out = recheck(ev, blobs.__getitem__)
    assert out.holds and out.to_json()["verdict"] == "holds"


def test_a_blob_that_is_not_the_one_named_is_refused(start: State, rows: torch.Tensor) -> None:
    ev, blobs = _verdict(start, rows, {2: "skip"})
    swapped = {**blobs, ev.after: blobs[ev.before]}  # a server handing out the wrong state
    with pytest.raises(ConfigError, match=r"after blob .* hashes to"):
        recheck(ev, swapped.__getitem__)


def test_evidence_of_another_kind_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a one-step verdict"):
        Evidence.from_json({"kind": "replay", "round": 1})
    with pytest.raises(ConfigError, match="lacks"):
        Evidence.from_json({"kind": "one_step_verdict", "round": 1})


def test_an_evidence_naming_another_model_than_its_state_is_refused_before_building_it(
    start: State, rows: torch.Tensor
) -> None:
    """A hostile ledger's evidence cannot make ``coloco audit`` build a model its blobs do not
    hold (a million blocks, a width of a million: memory the auditor would run out of)."""
    ev, blobs = _verdict(start, rows, {5: "skip"})
    for change in ({"n_layer": 3}, {"d_model": 128}, {"mlp_ratio": 8}, {"seq_len": 128},
                   {"n_layer": 1_000_000}, {"d_model": 1 << 20, "n_head": 1}):  # fmt: skip
        other = dataclasses.replace(ev, model={**ev.model, **change})
        with pytest.raises(ConfigError, match="is not the one its state holds"):
            recheck(other, blobs.__getitem__)
