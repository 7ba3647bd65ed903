"""The one definition of what a node signs in a hardware challenge (``/v1/market/challenges``).

Three steps, each an EIP-191 personal message (a wallet shows it as text) naming its purpose,
the ledger it is for and the node, so a signature is valid for nothing else::

    coloco.ledger.market-challenge.v1
    chain: <chain id>
    ledger: <ContributionLedger address, lowercase>
    node: <node address, lowercase>
    step: issue | commit | open
    challenge: <challenge id; 0 for issue>
    device: <device index; 0 for issue>
    digest: <0x sha256 of what the step carries>

What ``digest`` is: for ``issue``, :func:`claim_digest` of the claim (and a fresh request nonce
and an expiry, so a request cannot be replayed); for ``commit``, the device's Merkle root of C;
for ``open``, :meth:`reference.challenge.Opening.digest`. Only the node's own key can ask for a
challenge in its name: a failed challenge is a recorded misclaim, so nobody else may start one.
"""

from __future__ import annotations

import hashlib
from typing import Final, Literal

from protocol.eip712 import Eip712Domain, keccak256
from protocol.errors import SignatureError
from protocol.signing import recover_digest, sign_digest
from protocol.types import Address

TAG: Final = "coloco.ledger.market-challenge.v1"
Step = Literal["issue", "commit", "open"]
STEPS: Final = ("issue", "commit", "open")


def claim_digest(
    *, kind: str, devices: int, memory_bytes: int, flops: int, request: bytes, expires: int
) -> bytes:
    """sha256 of the claim a node asks to be challenged on (one line per field)."""
    text = (
        f"kind: {kind}\ndevices: {devices}\nmemory_bytes: {memory_bytes}\nflops: {flops}\n"
        f"request: 0x{request.hex()}\nexpires: {expires}"
    )
    return hashlib.sha256(text.encode()).digest()


def message(  # noqa: PLR0917 - the signed lines, in order
    domain: Eip712Domain, node: str, step: Step, challenge: int, device: int, digest: bytes
) -> bytes:
    """The exact text a node signs (see the module docstring)."""
    if step not in STEPS:
        raise ValueError(f"step {step!r}: expected one of {STEPS}")
    return (
        f"{TAG}\nchain: {domain.chain_id}\nledger: {domain.verifying_contract.lower()}\n"
        f"node: {node.lower()}\nstep: {step}\nchallenge: {challenge}\ndevice: {device}\n"
        f"digest: 0x{digest.hex()}"
    ).encode()


def message_digest(  # noqa: PLR0917 - the signed lines, in order
    domain: Eip712Domain, node: str, step: Step, challenge: int, device: int, digest: bytes
) -> bytes:
    """keccak256 of the EIP-191 (personal_sign) framing of :func:`message`."""
    msg = message(domain, node, step, challenge, device, digest)
    return bytes(keccak256(b"\x19Ethereum Signed Message:\n" + str(len(msg)).encode() + msg))


def sign(  # noqa: PLR0917 - the signed lines, in order
    key: bytes,
    domain: Eip712Domain,
    node: str,
    step: Step,
    challenge: int,
    device: int,
    digest: bytes,
) -> str:
    """0x-hex signature of one step by ``key`` (the node's hot key)."""
    return (
        "0x" + sign_digest(message_digest(domain, node, step, challenge, device, digest), key).hex()
    )


def check(  # noqa: PLR0917 - the signed lines, in order
    domain: Eip712Domain,
    node: str,
    step: Step,
    challenge: int,
    device: int,
    digest: bytes,
    signature: str,
) -> None:
    """SignatureError unless ``signature`` is ``node``'s over this step."""
    try:
        sig = bytes.fromhex(signature.removeprefix("0x"))
    except ValueError:
        raise SignatureError("signature is not hex") from None
    signer: Address = recover_digest(
        message_digest(domain, node, step, challenge, device, digest), sig
    )
    if signer.lower() != node.lower():
        raise SignatureError(
            f"the {step} of challenge {challenge} is signed by {signer}, not by node {node}: "
            "sign it with the node's key"
        )
