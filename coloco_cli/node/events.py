"""`coloco node run --events PATH`: the trainer's round records as JSON lines, and reading them.

The trainer logs one record per round worked (`round_done`, trainer.round.progress) and per hold
at a round boundary (`held`, trainer.round.hold); `EventsWriter` appends each as one JSON
object per line, and `read_events` is how the demo and the tests follow a node. Nothing
here imports the trainer.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

EVENTS = ("round_done", "held")  # a round worked; a hold at a round boundary (trainer.round.hold)


class EventsWriter(logging.Handler):
    """Writes the trainer's `round_done` and `held` records (logged as a dict, or `round_done` as
    JSON) as JSON lines."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.INFO)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        event = _round_event(record)
        if event is None:
            return
        line = json.dumps(event, sort_keys=True)
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()


def _round_event(record: logging.LogRecord) -> dict[str, Any] | None:
    args = record.args
    if isinstance(args, dict) and args.get("event") in EVENTS:
        return dict(args)
    if isinstance(record.msg, str) and record.msg.startswith('{"event": "round_done"'):
        try:
            value = json.loads(record.msg)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None
    return None


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events a node wrote with `--events` (a partial last line is skipped)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out
