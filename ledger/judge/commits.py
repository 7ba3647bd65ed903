"""Packet commitments: a member that signed one packet for the all-reduce and attests another.

Before the exchange every member signs a ``COMMIT`` naming the commitment hash of the packet it
feeds the all-reduce (trainer.round.commits), and its peers check the packet they receive against
it. The members hand the ledger those signed commits with their attestations. A member whose
attested ``pseudoGradient`` differs from the hash it signed in a ``COMMIT`` for the same round
made two different signed claims: it fails ``equivocation``, on its own signature (a fraud
record with both claims: a slash proposal), and every
member that averaged its committed packet (the holders of that commit) is excused from the
result check, since the ledger's step over the attested packets cannot be theirs (security
review F6: without this, the liar's result alone matches the ledger's and the honest members fail
``result_mismatch``).

Cheap for the honest: a commit that agrees with its signer's attestation costs one string compare;
signatures are recovered only for a commit that disagrees (an unsigned or forged commit frames
nobody).
"""

from __future__ import annotations

import json
import logging

from ledger.judge.entries import Entry, Fraud
from protocol.attestation import ATTESTATION_ATTRS
from protocol.coordination import Kind, SignedMessage
from protocol.eip712 import Eip712Domain, keccak256
from protocol.errors import ColocoError

log = logging.getLogger(__name__)


def _parse(raw: str) -> SignedMessage | None:
    try:
        return SignedMessage.from_wire(raw.encode())
    except (ColocoError, ValueError):
        return None


def check_commits(entries: list[Entry], domain: Eip712Domain | None) -> None:
    """Fail the members whose signed commit contradicts their attestation; excuse the holders."""
    if domain is None:
        return
    by_node = {e.att.node.lower(): e for e in entries}
    liars: dict[str, SignedMessage] = {}  # node -> its signed commit it did not attest
    holders: dict[str, set[str]] = {}  # node -> the entries that averaged its signed packet
    for e in entries:
        if not e.att.commits:
            continue
        try:
            wires = json.loads(e.att.commits)
        except ValueError:
            continue
        for raw in wires if isinstance(wires, list) else []:
            msg = _parse(raw) if isinstance(raw, str) else None
            if msg is None:
                continue
            m = msg.message
            signer = str(m.node).lower()
            other = by_node.get(signer)
            if other is None or m.kind != Kind.COMMIT or int(m.round) != int(e.att.round):
                continue
            if ("0x" + bytes(m.run_id).hex()).lower() != e.att.run_id.lower():
                continue
            signed = str(_body(msg).get("pseudoGradient", "")).lower()
            if signed == other.att.pseudo_gradient.lower():
                continue  # it attests what it committed to: nothing to check
            try:
                msg.verify(domain)
            except ColocoError:
                continue  # not its signature: frames nobody
            liars[signer] = msg
            holders.setdefault(signer, set()).add(e.att.node)
    for signer, msg in liars.items():
        liar = by_node[signer]
        signed = str(_body(msg).get("pseudoGradient", ""))
        liar.fail(
            "equivocation",
            f"the node signed a commitment to packet {signed} for round {liar.att.round}'s "
            f"all-reduce (held by {sorted(holders[signer])}) and attested packet "
            f"{liar.att.pseudo_gradient}: two different claims for one round",
        )
        liar.fraud = _evidence(liar, msg)
        for node in holders[signer]:
            e = by_node[node.lower()]
            e.excused = (
                f"member {liar.att.node} sent the all-reduce a packet other than the one it "
                "attested (its signed commitment is the evidence)"
            )
        log.warning("round %s: %s equivocated on its packet", liar.att.round, liar.att.node)


def _evidence(liar: Entry, msg: SignedMessage) -> Fraud:
    """The two signed claims, as a fraud record (a slash proposal: ledger.chain.slash): anyone
    can check both signatures and see the two packet hashes differ."""
    evidence = {
        "kind": "commit_equivocation",
        "attestation": {k: getattr(liar.att, k) for k in ATTESTATION_ATTRS},
        "digest": liar.att.digest,
        "signature": liar.att.signature,
        "commit": json.loads(msg.to_wire()),
    }
    text = json.dumps(evidence, sort_keys=True, default=str)
    return Fraud(text, "0x" + keccak256(text.encode()).hex())


def _body(msg: SignedMessage) -> dict[str, object]:
    try:
        return msg.body()
    except ColocoError:
        return {}
