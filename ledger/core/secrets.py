"""Secrets never leave the process: RPC URLs (provider keys), passwords and tokens are redacted.

:func:`register` records a settings object's secrets, :func:`add` and :func:`add_key` the ones
read later (a keystore's decrypted key and its password file); from then on every log record
(through a log record factory, so every handler sees the redacted text) and every error body
(:func:`redact`) shows ``<redacted>`` in their place.
"""

from __future__ import annotations

import logging
import threading
import traceback
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from ledger.core.config import Settings

MASK = "<redacted>"
_MIN_LEN = 6  # shorter fragments (a port, "rpc") would mask ordinary words
_secrets: set[str] = set()
_lock = threading.Lock()
_installed = False


def url_secrets(url: str) -> list[str]:
    """The parts of a URL that can carry a credential: all of it, user, password, path, query."""
    out = [url]
    try:
        parts = urlsplit(url)
    except ValueError:
        return out
    out += [parts.username or "", parts.password or "", parts.query]
    path = parts.path.strip("/")
    if path:
        out += [path, *path.split("/")]
    return out


def register(settings: Settings) -> None:
    """Redact ``settings``' secrets from every log line and error body from now on."""
    found = url_secrets(settings.rpc_url)
    db = urlsplit(settings.database_url)
    found += [db.password or ""]
    found.append(settings.admin_token.get_secret_value())
    for key in (settings.committer_private_key, settings.slasher_private_key):
        if key is not None:
            raw = key.get_secret_value()
            found += [raw, raw.removeprefix("0x")]
    # keystore keys and their password files register themselves as they are read
    # (config._key), so a key decrypted later is redacted too
    add(*found)


def add(*values: str) -> None:
    """Redact ``values`` (a decrypted key, a password read from a file) from now on."""
    with _lock:
        _secrets.update(s for s in values if len(s) >= _MIN_LEN)
    _install()


def add_key(key: bytes) -> None:
    """Redact a private key in the forms a log line could show it: hex, with and without 0x."""
    raw = key.hex()
    add(raw, "0x" + raw, raw.upper())


def redact(text: str) -> str:
    if not _secrets or not text:
        return text
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def _install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            try:
                message = record.getMessage()
            except Exception:  # a bad format string: leave it to the handler to report
                return record
            clean = redact(message)
            if clean != message:
                record.msg, record.args = clean, None
            if record.exc_info and record.exc_info[0] is not None:
                text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
                record.exc_text, record.exc_info = redact(text), None
            return record

        logging.setLogRecordFactory(factory)
