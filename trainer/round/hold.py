"""Holding a node at a round boundary: `coloco node run --hold-file PATH`.

An operator (or the demo, during a vote) can keep a node from starting new rounds without
stopping it: while PATH exists the node waits between rounds with its state, its process group
and its heartbeats intact, then goes on from the round it held before once PATH is removed.

PATH may hold a round number N: the node then finishes the rounds before N and holds before
round N (and any later one) only. An empty file holds before the next round.

On the overlap schedule (`--overlap`) the round in flight lands before the node holds, so round
N-1 is averaged, checkpointed and attested, and can be committed, while the node waits.

A held node does not join rounds at the ledger, so with a ledger the other members close their
rounds without it (trainer.network.coordination.ledger_view) and it joins the first round that opens
after its hold ends, fetching the checkpoint it missed from a peer. Unlike a stopped process
(SIGSTOP), a held node keeps sending heartbeats: its peers never take it for dead.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from protocol.errors import ConfigError

log = logging.getLogger(__name__)

POLL_S = 0.1


def hold_from(path: Path) -> int | None:
    """The first round held by `path` (0: every round), or None when the file is absent."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    if not text:
        return 0
    try:
        first = int(text)
    except ValueError:
        raise ConfigError(
            f"hold file {path} holds {text[:40]!r}: write a round number (hold before that "
            "round) or nothing (hold before the next round), or remove the file to go on"
        ) from None
    if first < 0:
        raise ConfigError(f"hold file {path} holds round {first}: a round number is >= 0")
    return first


def holds(path: Path, round_: int) -> bool:
    """Whether `path` holds `round_` now (the node then lands a round in flight before it
    waits: trainer.round.node)."""
    first = hold_from(path)
    return first is not None and round_ >= first


def hold_at_boundary(path: Path, round_: int) -> float:
    """Wait while `path` holds `round_`; the seconds held (0.0 if it did not)."""
    first = hold_from(path)
    if first is None or round_ < first:
        return 0.0
    # a structured record (`--events` writes it as a JSON line): the demo waits for every node's
    log.info(
        "holding before round %(round)d while %(path)s exists",
        {"event": "held", "round": round_, "path": str(path)},
    )
    start = time.monotonic()
    while (first := hold_from(path)) is not None and round_ >= first:
        time.sleep(POLL_S)
    held = time.monotonic() - start
    log.info("hold released after %.1f s; starting round %d", held, round_)
    return held
