"""Level 0 verification, done when an attestation arrives: form, signature, chain state, round.

Levels 1 and 2 (consistency across nodes, usefulness) run when the round closes
(:mod:`ledger.judge.rules`). Every check raises :class:`AttestationRejected` with a machine code
(see :data:`HTTP_STATUS`) and a message that says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass

from eth_utils.address import to_checksum_address

from ledger.chain.indexer import ChainSnapshot
from ledger.core.schemas import AttestationIn
from protocol.attestation import ComputeAttestation
from protocol.eip712 import Eip712Domain, check_address
from protocol.eip712 import to_checksum_address as checksum
from protocol.errors import AttestationRejected, EncodingError, SignatureError
from protocol.signing import check_signature, recover_checked

HTTP_STATUS: dict[str, int] = {
    "malformed_json": 400,
    "invalid_field": 422,
    "body_too_large": 413,
    "bad_signature": 422,
    "signer_mismatch": 403,
    "wrong_chain": 422,
    "wrong_contract": 422,
    "unregistered_node": 403,
    "not_staked": 403,
    "unknown_run": 404,
    "stale_round": 409,
    "round_closed": 409,
    "run_closed": 409,
    "future_round": 422,
    "future_config_version": 422,
    "conflicting_attestation": 409,
    "chain_not_indexed": 503,
    "batch_too_large": 413,
    "not_a_member": 403,
    "round_started": 409,
    "node_already_joined": 409,
    "no_show": 403,
}


def http_status(code: str) -> int:
    return HTTP_STATUS.get(code, 422)


def reject(code: str, message: str) -> AttestationRejected:
    return AttestationRejected(message, code=code)


@dataclass(frozen=True, slots=True)
class Checked:
    """An attestation whose form and signature are good (chain checks still to come)."""

    attestation: ComputeAttestation
    signature: bytes
    digest: bytes
    members: tuple[str, ...] | None
    run_hex: str
    commits: tuple[str, ...] | None = None
    """The members' signed packet commitments (wire form, checked when the round is judged)."""
    """The run id as 0x-hex, made once (intake's checks and rows use it several times)."""


def check_sender(item: AttestationIn, snap: ChainSnapshot) -> None:
    """The cheap refusals, before any signature work: chain not indexed, unknown or unstaked node.

    An anonymous flood naming unregistered addresses costs a dictionary lookup each, not a
    signature recovery. (A node's own refusals are recorded only once its signature verified.)
    """
    if snap.config is None or snap.indexed_block is None:
        raise reject(
            "chain_not_indexed", "the ledger has not indexed the chain yet: retry in a moment"
        )
    node: str = item.attestation.node  # a wire field (ledger.core.schemas.WireStruct)
    record = snap.nodes.get(node)
    if record is None or not record.registered:
        if to_checksum_address(node) != node:
            return  # the form check names the malformed address
        raise reject(
            "unregistered_node",
            f"node {node} is not registered in StakeManager: "
            "run `coloco node register` and stake first",
        )
    if not snap.is_active(node):
        raise reject(
            "not_staked",
            f"node {node} stakes {record.staked} wei, below the minimum "
            f"{snap.config.min_stake}: stake more (`coloco node stake`)",
        )


@dataclass(frozen=True, slots=True)
class Form:
    """An attestation whose fields parsed and whose signature is well formed: its signer is
    still to be recovered (:func:`recover_signers`) and matched (:func:`check_signer`)."""

    attestation: ComputeAttestation
    signature: bytes
    digest: bytes
    members: tuple[str, ...] | None
    commits: tuple[str, ...] | None = None


def check_form(item: AttestationIn, domain: Eip712Domain) -> Form:
    """Domain, fields and the signature's form (no signature work yet)."""
    if item.domain is not None:
        if item.domain.chainId != domain.chain_id:
            raise reject(
                "wrong_chain",
                f"signed for chain id {item.domain.chainId}, this ledger serves chain id "
                f"{domain.chain_id}: sign with the domain from GET /v1/eip712",
            )
        if item.domain.verifyingContract.lower() != domain.verifying_contract.lower():
            raise reject(
                "wrong_contract",
                f"signed for contract {item.domain.verifyingContract}, this ledger's "
                f"ContributionLedger is {domain.verifying_contract}: use GET /v1/eip712",
            )
    try:
        # the validated fields as they are (a pydantic model's __dict__: no model_dump copy)
        att = ComputeAttestation.from_json(vars(item.attestation))
        members = (
            tuple(check_address("round_members[]", m) for m in item.round_members)
            if item.round_members is not None
            else None
        )
    except EncodingError as exc:
        raise reject("invalid_field", str(exc)) from None
    if att.round == 0:
        raise reject("invalid_field", "round: round 0 is the genesis commit; attest rounds >= 1")
    try:
        signature = check_signature(item.signature)
    except SignatureError as exc:
        raise reject("bad_signature", str(exc)) from None
    commits = None if item.input_commits is None else tuple(item.input_commits)
    return Form(attestation=att, signature=signature, digest=att.digest(domain), members=members,
                commits=commits)  # fmt: skip


def recover_signers(forms: list[Form]) -> list[bytes | SignatureError]:
    """Each form's signer (20 raw bytes), or why none recovers, in one tight loop: a request's
    recoveries back to back keep libsecp256k1's tables in cache (measured: 8-12% less CPU a
    recovery than interleaved with parsing)."""
    out: list[bytes | SignatureError] = []
    for form in forms:
        try:
            out.append(recover_checked(form.digest, form.signature))
        except SignatureError as exc:
            out.append(exc)
    return out


def check_signer(form: Form, signer: bytes | SignatureError, domain: Eip712Domain) -> Checked:
    """The recovered signer must be the attestation's node."""
    att = form.attestation
    if isinstance(signer, SignatureError):
        raise reject("bad_signature", str(signer))
    if signer != bytes.fromhex(att.node[2:]):  # the raw bytes: no checksum for a match
        raise reject(
            "signer_mismatch",
            f"signature recovers to {checksum(signer)}, not to node {att.node}: sign with the "
            f"node's key over these exact fields, for chain id {domain.chain_id} and contract "
            f"{domain.verifying_contract} (GET /v1/eip712)",
        )
    return Checked(
        attestation=att,
        signature=form.signature,
        digest=form.digest,
        members=form.members,
        run_hex="0x" + att.run_id.hex(),
        commits=form.commits,
    )


def check_chain(checked: Checked, snap: ChainSnapshot, *, round_window: int) -> None:
    """Config version known, run known, round in the open window.

    Runs after :func:`check_sender` against the same snapshot (``Intake.check``), which
    refused an unindexed chain and an unregistered or unstaked node before any signature work:
    those checks are not repeated here."""
    att = checked.attestation
    if snap.config is None:  # check_sender refused this already; kept for the type checker
        raise reject(
            "chain_not_indexed", "the ledger has not indexed the chain yet: retry in a moment"
        )
    if att.config_version > snap.config.version:
        raise reject(
            "future_config_version",
            f"configVersion {att.config_version} is newer than TrainingConfig.version() "
            f"{snap.config.version}: read the config from the chain the ledger serves",
        )
    run = checked.run_hex
    last = snap.last_round.get(run)
    if last is None:
        raise reject(
            "unknown_run",
            f"run {run} has no genesis commit on chain: start it with POST /v1/runs first",
        )
    if att.round <= last:
        raise reject(
            "stale_round",
            f"round {att.round} of run {run} is already committed (last committed: {last}); "
            "attest the current round",
        )
    if att.round > last + round_window:
        raise reject(
            "future_round",
            f"round {att.round} of run {run} is in the future: the last committed round is "
            f"{last}, so rounds {last + 1}..{last + round_window} are open",
        )
