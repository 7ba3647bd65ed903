"""Event logs in block chunks: public RPC providers refuse `eth_getLogs` over a long range."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

DEFAULT_CHUNK = 2_000
"""Blocks per `eth_getLogs` call (most public providers allow 2k-10k)."""


def chunk_ranges(start: int, end: int, chunk: int) -> Iterator[tuple[int, int]]:
    """Inclusive [a, b] ranges of at most `chunk` blocks covering [start, end]."""
    if chunk < 1:
        raise ValueError("chunk must be at least one block")
    a = start
    while a <= end:
        b = min(a + chunk - 1, end)
        yield a, b
        a = b + 1


def event_logs(
    chain: ChainClient,
    contract: str,
    event: str,
    *,
    from_block: int,
    to_block: int | None = None,
    chunk: int = DEFAULT_CHUNK,
    argument_filters: dict[str, Any] | None = None,
) -> list[Any]:
    """Every `contract.event` log from `from_block` to `to_block` (default: the head), in order."""
    head = chain.block_number() if to_block is None else to_block
    ev = getattr(chain.contract(contract).events, event)
    out: list[Any] = []
    for a, b in chunk_ranges(max(from_block, 0), head, chunk):
        fetch = partial(ev.get_logs, from_block=a, to_block=b, argument_filters=argument_filters)
        logs = chain.rpc(fetch, f"eth_getLogs {contract}.{event} [{a}, {b}]")
        out.extend(logs)
    log.debug("%d %s.%s logs in blocks %d..%d", len(out), contract, event, from_block, head)
    return out
