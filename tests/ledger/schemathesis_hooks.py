"""Schemathesis hooks for tests/ledger/test_schema.py (loaded by `st run` through
SCHEMATHESIS_HOOKS): the ledger's own string format, so that generated valid requests carry
valid values of it.

``eip55-address`` (:data:`ledger.core.schemas.EIP55_FORMAT`): an address a signed struct
carries, in its EIP-55 checksummed form; a pattern cannot say so, the format does.
"""

from __future__ import annotations

import schemathesis
from hypothesis import strategies as st

from ledger.core.schemas import EIP55_FORMAT
from protocol.eip712 import to_checksum_address

schemathesis.openapi.format(
    EIP55_FORMAT,
    st.binary(min_size=20, max_size=20).map(lambda raw: to_checksum_address("0x" + raw.hex())),
)
