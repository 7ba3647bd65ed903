"""The low-level pieces: the fast Keccak, EIP-55 checksums, the domain separator."""

from __future__ import annotations

import threading

from Crypto.Hash import keccak
from eth_utils.address import to_checksum_address as eth_utils_checksum
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.eip712 import Eip712Domain, keccak256, to_checksum_address
from tests.vectors.generate import vector_address


def reference(data: bytes) -> bytes:
    return keccak.new(digest_bits=256, data=data).digest()


def test_keccak_known_value() -> None:
    assert (
        keccak256(b"").hex() == "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"
    )


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_keccak_equals_pycryptodome(data: bytes) -> None:
    assert keccak256(data) == reference(data)


def test_keccak_is_thread_safe() -> None:
    inputs = [bytes([i]) * (i * 13) for i in range(60)]
    expected = [reference(d) for d in inputs]
    failures: list[int] = []

    def work() -> None:
        for _ in range(50):
            failures.extend(i for i, d in enumerate(inputs) if keccak256(d) != expected[i])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=20, max_size=20))
def test_checksum_equals_eth_utils(raw: bytes) -> None:
    assert to_checksum_address(raw) == eth_utils_checksum(raw)
    assert to_checksum_address("0x" + raw.hex().upper()) == eth_utils_checksum(raw)


def test_domain_separator_depends_on_chain_and_contract() -> None:
    a = Eip712Domain(1, vector_address("c1"))
    assert a == Eip712Domain(1, vector_address("c1"))
    assert a.separator == Eip712Domain(1, vector_address("c1")).separator
    assert a.separator != Eip712Domain(2, vector_address("c1")).separator
    assert a.separator != Eip712Domain(1, vector_address("c2")).separator
    assert Eip712Domain.from_json(a.to_json()) == a
