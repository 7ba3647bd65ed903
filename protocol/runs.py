"""A run's name and its 32-byte id: the one rule every command, the nodes and the ledger share.

A run is named by a person (`coloco run open demo`); its id is the name's sha256. A text starting
with `0x` is an id already (64 hex digits), never a name. The ledger keeps the name an organiser
opened a run with (checked against the id) so the dashboard can show it.
"""

from __future__ import annotations

import hashlib

NAME_MAX = 64  # characters of a run name the ledger keeps


def run_id_of_name(name: str) -> bytes:
    """'demo' -> sha256(b'demo'): the id of the run named `name`."""
    return hashlib.sha256(name.encode()).digest()


def is_name(text: str) -> bool:
    """Whether `text` is a run name (hashed into the id), not a 0x id."""
    return not text.startswith("0x")


def short_id(run_id: str) -> str:
    """'0xd059b7ba92ad6f54…' -> '0xd059b7ba': a run id as a secondary label."""
    return run_id[:10]
