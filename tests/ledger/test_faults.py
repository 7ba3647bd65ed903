"""The fault suite (`python -m bench.faults`) on real processes: a subset in quick mode, the whole
quick suite when slow tests run. The suite's JSON is the assertion, as CI's acceptance reads it."""

from __future__ import annotations

import pytest

from bench.faults import SCENARIOS, main


def _check(summary: dict, names: list[str]) -> None:  # type: ignore[type-arg]
    assert summary["scenarios"] == len(names)
    failed = {n: r for n, r in summary["results"].items() if not r["passed"]}
    assert not failed, failed
    assert summary["lost"] == 0 and summary["double_settlements"] == 0


def test_fault_suite_kill9_and_blob_disk_full_quick() -> None:
    names = ["kill9", "blob_disk_full"]
    _check(main(["--quick", "--only", *names]), names)


@pytest.mark.slow
def test_fault_suite_quick_all_scenarios() -> None:
    summary = main(["--quick"])
    assert summary["scenarios"] >= 6
    _check(summary, list(SCENARIOS))
