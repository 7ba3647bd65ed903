"""Fast-path signing/recovery with coincurve, checked against eth-account, and its refusals."""

from __future__ import annotations

import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data

from protocol.attestation import ComputeAttestation
from protocol.eip712 import Eip712Domain
from protocol.errors import SignatureError
from protocol.signing import (
    SECP256K1_N,
    address_of_private_key,
    check_signature,
    recover_attestation_signer,
    recover_digest,
    sign_attestation,
    verify_attestation,
)
from tests.vectors.generate import vector_address, vector_key


def test_sign_matches_eth_account_and_recovers(
    attestation: ComputeAttestation, domain: Eip712Domain, key: bytes
) -> None:
    signature = sign_attestation(attestation, domain, key)
    message = encode_typed_data(full_message=attestation.typed_data(domain))
    assert signature == bytes(Account.sign_message(message, key).signature)
    assert Account.recover_message(message, signature=signature) == attestation.node
    assert recover_attestation_signer(attestation, domain, signature) == attestation.node
    assert verify_attestation(attestation, domain, signature) == attestation.node
    assert verify_attestation(attestation, domain, "0x" + signature.hex()) == attestation.node


def test_many_keys_round_trip(attestation: ComputeAttestation, domain: Eip712Domain) -> None:
    for i in range(20):
        key = vector_key(f"round-trip/{i}")
        node = address_of_private_key(key)
        assert node == Account.from_key(key).address
        att = attestation.replace(node=node)
        assert recover_attestation_signer(att, domain, sign_attestation(att, domain, key)) == node


def test_tampered_field_or_domain_fails_verification(
    attestation: ComputeAttestation, domain: Eip712Domain, key: bytes
) -> None:
    signature = sign_attestation(attestation, domain, key)
    with pytest.raises(SignatureError, match=r"recovers to .*, not to") as info:
        verify_attestation(attestation.replace(tokens=attestation.tokens + 1), domain, signature)
    assert info.value.code == "signer_mismatch"
    other = Eip712Domain(domain.chain_id + 1, domain.verifying_contract)
    with pytest.raises(SignatureError, match="not to"):
        verify_attestation(attestation, other, signature)


def test_signature_by_another_key_is_refused(
    attestation: ComputeAttestation, domain: Eip712Domain
) -> None:
    signature = sign_attestation(attestation, domain, vector_key("someone else"))
    with pytest.raises(SignatureError, match=f"not to {attestation.node}"):
        verify_attestation(attestation, domain, signature)


def test_high_s_twin_is_refused_though_ecrecover_would_accept_it(
    attestation: ComputeAttestation, domain: Eip712Domain, key: bytes
) -> None:
    signature = sign_attestation(attestation, domain, key)
    s = int.from_bytes(signature[32:64], "big")
    twin = signature[:32] + (SECP256K1_N - s).to_bytes(32, "big") + bytes((55 - signature[64],))
    # the malleable twin is a valid ECDSA signature for the same key ...
    message = encode_typed_data(full_message=attestation.typed_data(domain))
    assert Account.recover_message(message, signature=twin) == attestation.node
    # ... which coloco refuses, as OpenZeppelin's ECDSA does
    with pytest.raises(SignatureError, match="upper half of the curve order"):
        verify_attestation(attestation, domain, twin)


@pytest.mark.parametrize("v", [0, 1])
def test_v_zero_or_one_is_refused_with_a_hint(
    attestation: ComputeAttestation, domain: Eip712Domain, key: bytes, v: int
) -> None:
    signature = sign_attestation(attestation, domain, key)
    with pytest.raises(SignatureError, match=f"v must be 27 or 28, got {v} \\(add 27"):
        verify_attestation(attestation, domain, signature[:64] + bytes((v,)))


@pytest.mark.parametrize(
    ("signature", "match"),
    [
        (b"\x01" * 64, "expected 65 bytes .* got 64"),
        (b"\x01" * 66, "got 66"),
        (b"", "got 0"),
        ("0x" + "11" * 64, "got 64"),
        ("11" * 65, "no '0x' prefix"),
        ("0x" + "zz" * 65, "not valid hex"),
        (12345, "expected bytes or 0x-hex, got int"),
        (b"\x00" * 32 + b"\x01" * 32 + b"\x1b", "r is zero"),
        (b"\xff" * 32 + b"\x01" * 32 + b"\x1b", "r is zero or not below the curve order"),
        (b"\x01" * 32 + b"\x00" * 32 + b"\x1b", "s is zero"),
        (b"\x01" * 64 + b"\x1d", "v must be 27 or 28, got 29"),
    ],
)
def test_malformed_signatures_are_refused(signature: object, match: str) -> None:
    with pytest.raises(SignatureError, match=match):
        check_signature(signature)


def test_digest_and_expected_signer_are_checked(
    attestation: ComputeAttestation, domain: Eip712Domain, key: bytes
) -> None:
    signature = sign_attestation(attestation, domain, key)
    with pytest.raises(SignatureError, match="digest: expected 32 bytes, got 31"):
        recover_digest(b"\x00" * 31, signature)
    with pytest.raises(Exception, match=r"expected signer: .* not EIP-55"):
        verify_attestation(attestation, domain, signature, attestation.node.lower())  # type: ignore[arg-type]
    assert verify_attestation(attestation, domain, signature, attestation.node) == attestation.node
    assert vector_address("x") != attestation.node


def test_refuses_to_start_without_coincurve() -> None:
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys; sys.modules['coincurve'] = None\n"
        "try:\n    import protocol.signing\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo
    )
    assert out.stdout.startswith("ConfigError coincurve (libsecp256k1) is required")


def test_direct_recovery_agrees_with_coincurve_and_refuses_what_it_refuses() -> None:
    """The hot path calls libsecp256k1 directly (protocol.signing._make_recover): the same key
    as coincurve's public API for both recovery ids, and the same refusal when no point has
    ``r`` as its x coordinate."""
    import os

    from protocol.signing import _recover_public, _recover_public_fast

    assert _recover_public_fast is not _recover_public  # the fast path is the one in use
    for _ in range(20):
        digest, key = os.urandom(32), os.urandom(32)
        raw = coincurve_sign(digest, key)
        for recid in (0, 1):  # the other parity recovers another key: both must agree
            flipped = raw[:64] + bytes((recid,))
            assert _recover_public_fast(digest, flipped) == _recover_public(digest, flipped)
    digest = os.urandom(32)
    for x in range(1, 100):  # about half the x coordinates have no point on the curve
        sig = x.to_bytes(32, "big") + (1).to_bytes(32, "big") + b"\x00"
        try:
            _recover_public(digest, sig)
        except SignatureError:
            with pytest.raises(SignatureError, match="no public key recovers"):
                _recover_public_fast(digest, sig)
            break
    else:  # pragma: no cover
        pytest.fail("no x without a point in 1..99")


def coincurve_sign(digest: bytes, key: bytes) -> bytes:
    import coincurve

    return bytes(coincurve.PrivateKey(key).sign_recoverable(digest, hasher=None))
