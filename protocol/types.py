"""Typed ids and units shared by every part (NewType: free at run time, checked by mypy)."""

from __future__ import annotations

from typing import NewType

Address = NewType("Address", str)
"""A checksummed 0x-prefixed 20-byte address."""

Bytes32 = NewType("Bytes32", bytes)
"""Exactly 32 raw bytes (hashes, roots, commitments, run ids)."""

RunId = NewType("RunId", bytes)
"""32 raw bytes naming a training run."""

RoundNumber = NewType("RoundNumber", int)
"""An outer DiLoCo round, uint64. Round 0 is the genesis checkpoint commit."""

ChainId = NewType("ChainId", int)

Wei = NewType("Wei", int)
"""An amount of the chain's native currency, in wei."""

TokenUnits = NewType("TokenUnits", int)
"""An amount of ModelShareToken in its smallest unit (18 decimals)."""
