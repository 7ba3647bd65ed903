"""Who may write coordination messages: nodes registered and active in the StakeManager.

Readers check the claimed signer against the registry before recovering any signature (cheap
before expensive), and cache answers for ``ttl_s`` so a flood of messages from a foreign key
costs one RPC, not one per message.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from protocol.types import Address

log = logging.getLogger(__name__)


class Registry(Protocol):
    def admits(self, node: str) -> bool:
        """Whether ``node`` may take part in coordination (registered and active)."""
        ...


class ChainRegistry:
    """``StakeManager.isActive(node)`` on chain, cached for ``ttl_s`` seconds."""

    def __init__(self, chain: Any, *, ttl_s: float = 30.0) -> None:
        self.chain = chain
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[bool, float]] = {}

    def admits(self, node: str) -> bool:
        hit = self._cache.get(node)
        now = time.monotonic()
        if hit is not None and now - hit[1] < self.ttl_s:
            return hit[0]
        active = bool(self.chain.is_active(Address(node)))
        self._cache[node] = (active, now)
        return active


class StaticRegistry:
    """A fixed set of admitted addresses (tests and private offline runs)."""

    def __init__(self, nodes: set[str] | frozenset[str]) -> None:
        self.nodes = frozenset(nodes)

    def admits(self, node: str) -> bool:
        return node in self.nodes


class AnyKeyRegistry:
    """Offline runs without a chain: any key may speak (signatures still bind each message to
    its sender, round and kind, but nothing limits who joins). Logged once as a warning."""

    def __init__(self) -> None:
        log.warning(
            "coordination: no chain registry (offline run): any signed key is admitted; "
            "pass --rpc-url so only registered, active nodes can coordinate"
        )

    def admits(self, node: str) -> bool:
        return True
