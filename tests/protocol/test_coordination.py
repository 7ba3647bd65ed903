"""The signed coordination envelope: domain separation, payload binding, strict wire form."""

from __future__ import annotations

import dataclasses

import pytest

from protocol.coordination import CoordinationMessage, Kind, SignedMessage
from protocol.eip712 import Eip712Domain
from protocol.errors import EncodingError, SignatureError
from protocol.keys import NodeKey

KEY = NodeKey.from_private_key(bytes([3]) * 32)
OTHER = NodeKey.from_private_key(bytes([4]) * 32)
DOMAIN = Eip712Domain(chain_id=31337, verifying_contract=OTHER.address)
RUN = bytes([0xAB]) * 32


def _join(**over: object) -> SignedMessage:
    args: dict[str, object] = {"run_id": RUN, "round": 3, "attempt": 0, "kind": Kind.JOIN,
                               "payload": {"head": 12, "endpoint": ""}} | over  # fmt: skip
    return SignedMessage.create(KEY.private_key, KEY.address, DOMAIN, **args)  # type: ignore[arg-type]


def test_round_trip_and_verify() -> None:
    signed = _join()
    back = SignedMessage.from_wire(signed.to_wire())
    assert back == signed
    assert back.verify(DOMAIN) == KEY.address
    assert back.body() == {"head": 12, "endpoint": ""}


@pytest.mark.parametrize(
    "field,value",
    [("round", 4), ("attempt", 1), ("kind", Kind.LEAVE), ("run_id", bytes(32))],
)
def test_a_signature_does_not_carry_to_another_round_attempt_kind_or_run(
    field: str, value: object
) -> None:
    signed = _join()
    moved = dataclasses.replace(
        signed, message=dataclasses.replace(signed.message, **{field: value})
    )
    with pytest.raises(SignatureError, match="signed by"):
        moved.verify(DOMAIN)


def test_other_domain_other_signer_other_payload_are_refused() -> None:
    signed = _join()
    other_chain = Eip712Domain(chain_id=1, verifying_contract=OTHER.address)
    with pytest.raises(SignatureError, match="signed by"):
        signed.verify(other_chain)
    other_node = dataclasses.replace(signed.message, node=OTHER.address)
    claimed = dataclasses.replace(signed, message=other_node)
    with pytest.raises(SignatureError, match="signed by"):
        claimed.verify(DOMAIN)
    with pytest.raises(SignatureError, match="payload does not hash"):
        dataclasses.replace(signed, payload=b'{"endpoint":"","head":99}').verify(DOMAIN)


@pytest.mark.parametrize(
    "wire",
    [b"not json", b"[]", b'{"message":{},"payload":"{}","signature":"0x00"}', b"x" * (2 << 20)],
)
def test_malformed_wire_is_refused(wire: bytes) -> None:
    with pytest.raises((EncodingError, SignatureError)):
        SignedMessage.from_wire(wire)


def test_unknown_kind_is_refused() -> None:
    data = _join().message.to_json() | {"kind": 99}
    with pytest.raises(EncodingError, match="unknown kind"):
        CoordinationMessage.from_json(data)
