"""The one definition of a blob upload authorisation: which node may put which blob, until when.

A registered node signs, with its hot key, an EIP-191 personal message (a wallet shows it as
text) that names its purpose and the ledger it is for, so it is valid for nothing else::

    coloco.ledger.blob-upload.v1
    chain: <chain id>
    ledger: <ContributionLedger address, lowercase>
    node: <node address, lowercase>
    blob: <0x canonical hash of the blob's tensors>
    expires: <unix seconds>

It travels in three headers (:data:`HEADERS`). The ledger checks the cheap things first (headers
well formed, node registered and active, expiry in the future and at most
:data:`MAX_VALIDITY_S` ahead) and recovers the signature last.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from protocol.eip712 import Eip712Domain, keccak256
from protocol.errors import SignatureError
from protocol.signing import address_of_private_key, recover_digest, sign_digest
from protocol.types import Address

TAG: Final = "coloco.ledger.blob-upload.v1"
MAX_VALIDITY_S: Final = 15 * 60
NODE_HEADER: Final = "x-coloco-node"
EXPIRES_HEADER: Final = "x-coloco-expires"
SIGNATURE_HEADER: Final = "x-coloco-signature"
HEADERS: Final = (NODE_HEADER, EXPIRES_HEADER, SIGNATURE_HEADER)


def upload_message(domain: Eip712Domain, node: str, blob: str, expires: int) -> bytes:
    """The exact text a node signs to upload ``blob`` (see module docstring)."""
    return (
        f"{TAG}\nchain: {domain.chain_id}\nledger: {domain.verifying_contract.lower()}\n"
        f"node: {node.lower()}\nblob: {blob.lower()}\nexpires: {expires}"
    ).encode()


def upload_digest(domain: Eip712Domain, node: str, blob: str, expires: int) -> bytes:
    """keccak256 of the EIP-191 (version 0x45, personal_sign) framing of the message."""
    msg = upload_message(domain, node, blob, expires)
    return bytes(keccak256(b"\x19Ethereum Signed Message:\n" + str(len(msg)).encode() + msg))


@dataclass(frozen=True)
class UploadSigner:
    """Signs upload headers with a node's hot key for one ledger domain."""

    key: bytes
    domain: Eip712Domain
    validity_s: int = 300

    def headers(self, blob: str, *, now: float | None = None) -> dict[str, str]:
        node = address_of_private_key(self.key)
        expires = int(now if now is not None else time.time()) + self.validity_s
        sig = sign_digest(upload_digest(self.domain, node, blob, expires), self.key)
        return {
            NODE_HEADER: node,
            EXPIRES_HEADER: str(expires),
            SIGNATURE_HEADER: "0x" + sig.hex(),
        }


def parse_expires(value: str, *, now: float) -> int:
    """The expiry, if it is a decimal in (now, now + MAX_VALIDITY_S]; SignatureError otherwise."""
    if not value.isdigit() or len(value) > 12:
        raise SignatureError(f"{EXPIRES_HEADER} must be unix seconds, got {value[:20]!r}")
    expires = int(value)
    if expires <= now:
        raise SignatureError(
            f"upload authorisation expired at {expires} (now {int(now)}): sign again"
        )
    if expires > now + MAX_VALIDITY_S:
        raise SignatureError(
            f"upload authorisation valid until {expires}: at most {MAX_VALIDITY_S}s ahead"
        )
    return expires


def recover_uploader(
    domain: Eip712Domain, node: str, blob: str, expires: int, signature: str
) -> Address:
    """The address that signed the upload message (compare it with ``node``)."""
    try:
        sig = bytes.fromhex(signature.removeprefix("0x"))
    except ValueError:
        raise SignatureError(f"{SIGNATURE_HEADER} is not hex") from None
    return recover_digest(upload_digest(domain, node, blob, expires), sig)
