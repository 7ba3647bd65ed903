"""`node run --hold-file`: a node holds at a round boundary (state and heartbeats kept) and goes on
together with the others once the file is gone (trainer.round.hold)."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest

from coloco_cli.node.events import read_events
from protocol.errors import ConfigError
from tests.trainer.nodes import Plan, collect, start_nodes
from trainer.round.hold import hold_at_boundary, hold_from


def test_the_file_says_from_which_round_to_hold(tmp_path: Path) -> None:
    path = tmp_path / "hold"
    assert hold_from(path) is None  # no file: no hold
    path.write_text("")
    assert hold_from(path) == 0  # empty: before the next round, whichever it is
    path.write_text(" 3\n")
    assert hold_from(path) == 3
    path.write_text("soon")
    with pytest.raises(ConfigError, match="write a round number"):
        hold_from(path)
    path.write_text("-1")
    with pytest.raises(ConfigError, match=">= 0"):
        hold_from(path)


def test_a_round_before_the_held_one_starts_at_once(tmp_path: Path) -> None:
    path = tmp_path / "hold"
    path.write_text("3")
    assert hold_at_boundary(path, 2) == 0.0
    assert hold_at_boundary(tmp_path / "absent", 7) == 0.0


def test_a_held_round_starts_once_the_file_is_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "hold"
    path.write_text("3")
    remover = threading.Timer(0.4, path.unlink)
    remover.start()
    with caplog.at_level(logging.INFO, logger="trainer.round.hold"):
        held = hold_at_boundary(path, 4)
    remover.join()
    assert held >= 0.35
    events = [r.args for r in caplog.records if isinstance(r.args, dict)]
    assert events == [{"event": "held", "round": 4, "path": str(path)}]


@pytest.mark.distributed
@pytest.mark.parametrize("overlap", [False, True], ids=["lockstep", "overlap"])
def test_held_nodes_wait_at_the_boundary_then_train_the_round_together(
    tmp_path: Path, corpus_dir: Path, store_port: int, overlap: bool
) -> None:
    """Two real nodes finish round 1 and hold before round 2 (each writes a `held` event and
    trains nothing more while the file exists); once it is removed, both train round 2 as one
    group and go on to round 3. On the overlap schedule round 1 (in flight) lands before the
    hold: it is reported (and attested) while the nodes wait, as the demo's vote needs."""
    hold = tmp_path / "hold"
    hold.write_text("2")
    events = [tmp_path / f"events{k}.jsonl" for k in range(2)]
    plans = [
        Plan(
            key=k,
            rounds=3,
            min_nodes=2,
            hold_file=str(hold),
            events=str(events[k]),
            overlap=overlap,
        )
        for k in range(2)
    ]
    procs, results, manager = start_nodes(plans, store_port, corpus_dir)
    try:
        deadline = time.monotonic() + 180
        while not all(
            any(e.get("event") == "held" and e["round"] == 2 for e in read_events(path))
            for path in events
        ):
            assert all(p.is_alive() for p in procs), "a node exited instead of holding"
            assert time.monotonic() < deadline, "the nodes never held before round 2"
            time.sleep(0.1)
        time.sleep(1.0)  # held: nothing of round 2 is trained while the file exists
        trained = {k: [rec["round"] for rec in results.get(k, [])] for k in range(2)}
        assert trained == {0: [1], 1: [1]}, json.dumps(trained)
    except BaseException:
        for p in procs:
            p.kill()
        manager.shutdown()
        raise
    hold.unlink()
    out = collect(procs, results, manager)
    assert out["exit_codes"] == [0, 0]
    for k in range(2):
        records = out["results"][k]
        assert [rec["round"] for rec in records] == [1, 2, 3]
        assert len(records[1]["members"]) == 2  # round 2: both nodes, one group
