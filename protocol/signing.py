"""Sign and verify attestations with libsecp256k1 (coincurve): the fast path.

Signatures are 65 bytes ``r || s || v`` with ``v`` in {27, 28} and ``s`` in the lower half of the
curve order, exactly what OpenZeppelin's ``ECDSA.recover`` (and so
``ContributionLedger.verifyAttestation``) accepts. ``v`` in {0, 1} is refused rather than
normalised: the contract would refuse it too, and a signature should verify the same way
everywhere. High-s (malleable) signatures are refused for the same reason.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Final

from protocol.attestation import ComputeAttestation
from protocol.eip712 import Eip712Domain, check_address, keccak256, to_checksum_address
from protocol.errors import ConfigError, SignatureError
from protocol.types import Address

try:
    import coincurve
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    raise ConfigError(
        "coincurve (libsecp256k1) is required: without it signature recovery falls back to "
        "pure Python and is ~80x slower. Install it: pip install 'coincurve>=21'"
    ) from exc

SECP256K1_N: Final = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
SECP256K1_HALF_N: Final = SECP256K1_N // 2
SIGNATURE_LENGTH: Final = 65


def check_signature(signature: object) -> bytes:
    """Return ``signature`` as 65 bytes after checking its form; raise SignatureError if bad.

    Accepts raw bytes or a 0x-prefixed hex string (130 hex digits).
    """
    if isinstance(signature, str):
        text = signature
        if not text.startswith("0x"):
            raise SignatureError("signature: expected 0x-prefixed hex, got no '0x' prefix")
        try:
            signature = bytes.fromhex(text[2:])
        except ValueError:
            raise SignatureError("signature: not valid hex") from None
    if not isinstance(signature, bytes | bytearray):
        raise SignatureError(f"signature: expected bytes or 0x-hex, got {type(signature).__name__}")
    sig = bytes(signature)
    if len(sig) != SIGNATURE_LENGTH:
        raise SignatureError(
            f"signature: expected {SIGNATURE_LENGTH} bytes (r || s || v), got {len(sig)}"
        )
    r = int.from_bytes(sig[:32], "big")
    s = int.from_bytes(sig[32:64], "big")
    v = sig[64]
    if v not in (27, 28):
        hint = " (add 27: coloco, like OpenZeppelin ECDSA, takes v in {27, 28})" if v < 2 else ""
        raise SignatureError(f"signature: v must be 27 or 28, got {v}{hint}")
    if not 0 < r < SECP256K1_N:
        raise SignatureError("signature: r is zero or not below the curve order")
    if not 0 < s <= SECP256K1_HALF_N:
        raise SignatureError(
            "signature: s is zero or in the upper half of the curve order (malleable form); "
            "sign with a library that produces low-s signatures (EIP-2)"
        )
    return sig


def address_of_public_key(uncompressed: bytes) -> Address:
    """The Ethereum address of a 65-byte uncompressed public key."""
    return Address(to_checksum_address(keccak256(uncompressed[1:])[12:]))


def _recover_raw(digest: bytes, signature: object) -> bytes:
    """The 20 raw address bytes that signed ``digest``."""
    return recover_checked(digest, check_signature(signature))


def _recover_public(digest: bytes, recoverable: bytes) -> bytes:
    """The 65-byte uncompressed public key (coincurve's public API: the reference)."""
    try:
        public = coincurve.PublicKey.from_signature_and_message(recoverable, digest, hasher=None)
    except Exception as exc:  # coincurve raises plain Exception/ValueError on no solution
        raise SignatureError(f"signature: no public key recovers from it ({exc})") from None
    return bytes(public.format(compressed=False))


def _make_recover() -> Callable[[bytes, bytes], bytes]:
    """libsecp256k1's parse, recover and serialize called directly through coincurve's cffi
    binding: the same three C calls as ``PublicKey.from_signature_and_message(...).format()``
    without coincurve's Python layers (argument checks done once by :func:`check_signature`,
    a ``PublicKey`` object, a context lookup per call): 4-5 us of about 50 per recovery.
    Falls back to the public API if coincurve's internals ever change shape."""
    try:
        binding = importlib.import_module("coincurve._libsecp256k1")
        ctx = importlib.import_module("coincurve.context").GLOBAL_CONTEXT.ctx
        ffi, lib = binding.ffi, binding.lib
        parse = lib.secp256k1_ecdsa_recoverable_signature_parse_compact
        recover, serialize = lib.secp256k1_ecdsa_recover, lib.secp256k1_ec_pubkey_serialize
        uncompressed = lib.SECP256K1_EC_UNCOMPRESSED
    except (ImportError, AttributeError):  # pragma: no cover - other coincurve layouts
        return _recover_public

    def recover_public(digest: bytes, recoverable: bytes) -> bytes:
        signature = ffi.new("secp256k1_ecdsa_recoverable_signature *")
        public = ffi.new("secp256k1_pubkey *")
        if not parse(ctx, signature, recoverable[:64], recoverable[64]) or not recover(
            ctx, public, signature, digest
        ):
            raise SignatureError(
                "signature: no public key recovers from it (failed to recover ECDSA public key)"
            )
        out = ffi.new("unsigned char[65]")
        serialize(ctx, out, ffi.new("size_t *", 65), public, uncompressed)
        return ffi.buffer(out)[:]  # type: ignore[no-any-return]

    probe_key = coincurve.PrivateKey(bytes(31) + b"\x07")
    for probe in (bytes(32), bytes(range(32))):
        raw = probe_key.sign_recoverable(probe, hasher=None)
        if recover_public(probe, raw) != _recover_public(probe, raw):  # pragma: no cover
            return _recover_public
    return recover_public


_recover_public_fast = _make_recover()


def recover_checked(digest: bytes, sig: bytes) -> bytes:
    """The 20 raw address bytes that signed ``digest``, for a signature that already passed
    :func:`check_signature` (the ledger's hot path checks it once, not twice)."""
    if len(digest) != 32:
        raise SignatureError(f"digest: expected 32 bytes, got {len(digest)}")
    recoverable = sig[:64] + bytes((sig[64] - 27,))
    return keccak256(_recover_public_fast(digest, recoverable)[1:])[12:]


def recover_digest(digest: bytes, signature: object) -> Address:
    """The checksummed address that signed the 32-byte ``digest``."""
    return Address(to_checksum_address(_recover_raw(digest, signature)))


def sign_digest(digest: bytes, private_key: bytes) -> bytes:
    """65-byte ``r || s || v`` (v in {27, 28}, low s) over a 32-byte digest."""
    if len(digest) != 32:
        raise SignatureError(f"digest: expected 32 bytes, got {len(digest)}")
    if len(private_key) != 32:
        raise SignatureError(f"private key: expected 32 bytes, got {len(private_key)}")
    raw = coincurve.PrivateKey(private_key).sign_recoverable(digest, hasher=None)
    return raw[:64] + bytes((raw[64] + 27,))


def address_of_private_key(private_key: bytes) -> Address:
    """The address of a 32-byte private key."""
    public = coincurve.PrivateKey(private_key).public_key.format(compressed=False)
    return address_of_public_key(public)


def sign_attestation(
    attestation: ComputeAttestation, domain: Eip712Domain, private_key: bytes
) -> bytes:
    """Sign ``attestation`` under ``domain``; the key's address should be ``attestation.node``."""
    return sign_digest(attestation.digest(domain), private_key)


def recover_attestation_signer(
    attestation: ComputeAttestation, domain: Eip712Domain, signature: object
) -> Address:
    """Who signed ``attestation`` under ``domain`` (no check against ``attestation.node``)."""
    return recover_digest(attestation.digest(domain), signature)


def verify_attestation(
    attestation: ComputeAttestation,
    domain: Eip712Domain,
    signature: object,
    expected_signer: Address | None = None,
) -> Address:
    """Check that ``expected_signer`` (default ``attestation.node``) signed it; return it.

    Raises SignatureError naming both addresses when the signature recovers to someone else.
    """
    if expected_signer is None:
        expected = attestation.node  # validated when the attestation was built
    else:
        expected = check_address("expected signer", expected_signer)
    raw = _recover_raw(attestation.digest(domain), signature)
    if raw != bytes.fromhex(expected[2:]):
        raise SignatureError(
            f"signature: recovers to {to_checksum_address(raw)}, not to {expected}; it was made "
            f"by another key or over different fields, chain id or contract",
            code="signer_mismatch",
        )
    return expected
