"""Structured logs: one JSON object per line (time, level, logger, message, extra fields)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:  # pre-formatted (and redacted) by ledger.core.secrets
            data["exc"] = record.exc_text
        return orjson.dumps(data, default=str).decode()


def configure(level: str = "info", *, json_logs: bool = True) -> None:
    """Route every logger (uvicorn's too) through one handler on stderr; each line carries the
    request id of the request it belongs to (ledger.core.request_id)."""
    from ledger.core.request_id import install_log_field

    install_log_field()
    handler = logging.StreamHandler()
    if json_logs:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
