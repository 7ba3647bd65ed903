"""Slashing as functions (the `coloco slash` group and tests call them).

Two paths exist (docs/contracts.md): anyone may report an equivocation (two attestations signed
by one node key for the same run and round with different content) and the StakeManager slashes
a governed fraction at once, paying the reporter a share; any other fault goes through
governance: a proposal whose action is `StakeManager.proposeSlash`, which freezes the node's
stake for the slash dispute window, during which the guardian or governance may veto; after it
anyone executes the slash.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eth_utils.crypto import keccak

from coloco_cli.common import explained_revert
from coloco_cli.gov.ops import Proposal
from protocol.attestation import ComputeAttestation
from protocol.chain_views import attestation_tuple
from protocol.errors import ConfigError, EncodingError
from protocol.signing import check_signature

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

STATUS = {0: "none", 1: "pending", 2: "executed", 3: "vetoed"}
HINTS = {
    "NotEquivocation": (
        "the two attestations are not an equivocation: they must name the same node, run and "
        "round and differ in content"
    ),
    "EquivocationAlreadySlashed": "this node was already slashed for that run and round",
    "WrongSigner": "a signature was not made by the attestation's node key",
    "InvalidSignature": "a signature is malformed (65 bytes r||s||v, low s)",
    "NodeNotRegistered": "the signing key was never registered: there is no stake to slash",
    "NotGuardian": "only the guardian (or governance) may veto a slash",
    "NotPendingSlash": "no pending slash with that id: see coloco slash status",
    "SlashNotReady": "the slash dispute window has not ended: execute after the time shown",
}


@dataclass(frozen=True)
class SignedAttestation:
    attestation: ComputeAttestation
    signature: bytes


def load_signed(path: Path) -> SignedAttestation:
    """A JSON file {"attestation": {...wire form...}, "signature": "0x..."}."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no evidence file at {path}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON ({exc})") from exc
    if not isinstance(data, dict) or set(data) != {"attestation", "signature"}:
        raise ConfigError(
            f'{path}: expected {{"attestation": {{...}}, "signature": "0x..."}} '
            "(the body a node posts to the ledger)"
        )
    sig_text = data["signature"]
    if not isinstance(sig_text, str) or not sig_text.startswith("0x"):
        raise ConfigError(f"{path}: signature must be 0x-prefixed hex")
    try:
        return SignedAttestation(
            ComputeAttestation.from_json(data["attestation"]),
            check_signature(bytes.fromhex(sig_text[2:])),
        )
    except (EncodingError, ValueError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _transact(chain: ChainClient, fn: str, *args: Any) -> Any:
    with explained_revert(HINTS, f"StakeManager.{fn}"):
        return chain.transact("StakeManager", fn, *args)


def report_equivocation(chain: ChainClient, a: SignedAttestation, b: SignedAttestation) -> int:
    """Submit the evidence; returns the wei slashed (the sender receives the reporter share)."""
    x, y = a.attestation, b.attestation
    if (x.node, x.run_id, x.round) != (y.node, y.run_id, y.round) or x == y:
        raise ConfigError(HINTS["NotEquivocation"])
    args = (attestation_tuple(x), a.signature, attestation_tuple(y), b.signature)
    return _slashed(chain, _transact(chain, "reportEquivocation", *args))


def _slashed(chain: ChainClient, receipt: Any) -> int:
    """The wei the `Slashed` event of `receipt` took (0 if the node had no stake)."""
    events = chain.contract("StakeManager").events.Slashed().process_receipt(receipt)
    return sum(int(e["args"]["amount"]) for e in events)


def propose_slash(
    chain: ChainClient, node: str, amount: int, evidence: str, reporter: str | None = None
) -> Proposal:
    """A governance proposal whose action is StakeManager.proposeSlash(node, amount, ...)."""
    from coloco_cli.gov.ops import propose_calls

    if amount <= 0:
        raise ConfigError("--amount must be more than zero")
    if not evidence:
        raise ConfigError("--evidence must say what the node did (its hash goes on chain)")
    stake = chain.contract("StakeManager")
    zero = "0x" + "00" * 20
    call = stake.encode_abi(
        "proposeSlash", args=[node, amount, keccak(text=evidence), reporter or zero]
    )
    description = f"coloco: slash node {node} by {amount} wei: {evidence}"
    return propose_calls(chain, [str(stake.address)], [bytes.fromhex(call[2:])], description)


def veto_slash(chain: ChainClient, slash_id: int) -> Any:
    return _transact(chain, "vetoSlash", slash_id)


def execute_slash(chain: ChainClient, slash_id: int) -> int:
    """Execute a pending slash past its window; returns the wei taken (min(amount, stake))."""
    return _slashed(chain, _transact(chain, "executeSlash", slash_id))


@dataclass(frozen=True)
class SlashStatus:
    slash_id: int
    node_id: int
    status: str
    executable_at: int
    reporter: str
    amount: int
    evidence_hash: bytes


def slash_status(chain: ChainClient, slash_id: int) -> SlashStatus:
    p = chain.stake_manager.slash_proposal(slash_id)
    if p.status == 0:
        count = chain.stake_manager.proposal_count()
        raise ConfigError(f"no slash proposal {slash_id}: ids run from 1 to {count}")
    return SlashStatus(
        slash_id, p.node_id, STATUS[p.status], p.executable_at, str(p.reporter), int(p.amount),
        bytes(p.evidence_hash),
    )  # fmt: skip
