"""`coloco node run` off a terminal: every log line one JSON object (for files, journald, jq).

On a terminal the node shows its live table and text log lines. Off one (a pipe, a file,
nohup, systemd) there is no table (trainer.cli) and the log handlers on stderr write JSON lines
instead: `{"ts", "level", "logger", "msg"}`, and a record that is itself a JSON object (the
round line, `{"event": "round_done", ...}`: trainer.round.progress) is that object with
`ts`, `level` and `logger` added, never a Python repr inside text.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TextIO


class JsonLines(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        message = record.getMessage()
        parsed: Any = None
        if message.startswith("{"):
            try:
                parsed = json.loads(message)
            except json.JSONDecodeError:
                parsed = None
        if isinstance(parsed, dict):
            data.update(parsed)
        else:
            data["msg"] = message
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


@contextmanager
def json_lines_off_a_terminal(stream: TextIO | None = None) -> Iterator[bool]:
    """While inside: when `stream` (stderr) is no terminal, the root logger's handlers that write
    to it format JSON lines; yields whether they do. Their formats come back on exit."""
    stream = stream or sys.stderr
    if stream.isatty():
        yield False
        return
    handlers = [
        h for h in logging.getLogger().handlers
        if type(h) is logging.StreamHandler and h.stream in (stream, sys.stderr)
    ]  # fmt: skip
    before = [(h, h.formatter) for h in handlers]
    for handler in handlers:
        handler.setFormatter(JsonLines())
    try:
        yield bool(handlers)
    finally:
        for handler, formatter in before:
            handler.setFormatter(formatter)
