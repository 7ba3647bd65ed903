"""TrainingConfig's versions as the chain had them, for an auditor that replays old rounds.

A round is trained, and judged by the ledger, under the ``configVersion`` its attestations sign
(ledger.judge.claims.round_config), which a later vote replaces on chain. An auditor that read
only today's settings replayed every round before a vote with the new inner lr, H or mixture,
and failed honest work. Each version is read where it took effect: at the block of its
``ConfigUpdated`` log (the constructor logs version 1 too). An RPC that no longer serves a
block's state (a pruned node) leaves that version unknown, and a pair trained under it is
unverifiable, never failed.
"""

from __future__ import annotations

import logging
from typing import Any

from protocol.errors import ChainError
from reference.settings import TrainingSettings

log = logging.getLogger(__name__)

_CHUNK = 10_000  # blocks per eth_getLogs query


class ConfigHistory:
    """``get(version)``: the settings of TrainingConfig ``version``, or None when the chain
    cannot tell them (never another version's). Reads lazily, once."""

    def __init__(self, chain: Any, deployment_block: int) -> None:
        self.chain = chain
        self.deployment_block = deployment_block
        self._current: TrainingSettings | None = None
        self._blocks: dict[int, int] | None = None
        self._read: dict[int, TrainingSettings | None] = {}

    @property
    def current(self) -> TrainingSettings:
        if self._current is None:
            self._current = TrainingSettings.read(self.chain)
        return self._current

    def get(self, version: int) -> TrainingSettings | None:
        if version == self.current.version:
            return self.current
        if version not in self._read:
            self._read[version] = self._at(version)
        return self._read[version]

    def _at(self, version: int) -> TrainingSettings | None:
        block = self._updates().get(version)
        if block is None:
            return None
        try:
            cfg = TrainingSettings.read(self.chain, block=block)
        except (ChainError, ValueError) as exc:  # a pruned block's state, or no code there yet
            log.warning("TrainingConfig version %d (block %d) not readable: %s", version,
                        block, exc)  # fmt: skip
            return None
        return cfg if cfg.version == version else None

    def _updates(self) -> dict[int, int]:
        """Each version's block, from TrainingConfig's ``ConfigUpdated`` logs (the last log of
        a version wins: several setters in one transaction bump it once each)."""
        if self._blocks is not None:
            return self._blocks
        contract = self.chain.contract("TrainingConfig")
        event = contract.events.ConfigUpdated
        head = int(self.chain.rpc(lambda: self.chain.w3.eth.block_number, "eth_blockNumber"))
        out: dict[int, int] = {}
        for start in range(self.deployment_block, head + 1, _CHUNK):
            end = min(head, start + _CHUNK - 1)
            logs = self.chain.rpc(
                lambda s=start, e=end: event.get_logs(from_block=s, to_block=e),
                "eth_getLogs ConfigUpdated",
            )
            for entry in logs:
                out[int(entry["args"]["version"])] = int(entry["blockNumber"])
        self._blocks = out
        return out
