"""Compute leases paid inside the round's settlement: the lease leaves of a rewards root.

An organiser escrows a lease in ``ComputeLeases`` (``LeaseOpened``: node, price per round, the
window ``startRound..endRound`` of the run's ledger rounds). The ledger sends nothing per round
for it: every settlement intent (:meth:`ledger.chain.settlement.Settler.record_intent`) folds one
leaf per known lease of its run into the rewards root it commits anyway, ``(lease id, cumulative
wei, through round)`` = the price times the rounds of the window, up to ``through``, in which the
leased node's attestation was verified. The node claims that leaf against any final root; after
the window's last round is settled, one ``refund`` returns the unearned escrow.

Exact under crashes and reorgs: the leaves are computed inside the intent's database transaction
and stored with it (``settlement.leases``), so a restart re-sends the same root (never a second
one for the round); leases are known from the indexer's ``funding_event`` rows, which follow its
confirmation depth and its reorg rewind; the amounts are cumulative, so a lease indexed late, a
root revoked or a claim missed is made up by the next root, and the contract pays only the
difference to what was paid (never twice, never beyond price x committed rounds of the window).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import func
from sqlmodel import Session, col, select

from ledger.core.models import Attestation, FundingEvent, MarketOffer
from protocol.deployment import Deployment
from protocol.eip712 import to_checksum_address
from protocol.merkle import lease_leaf_hash
from protocol.types import Address, Bytes32

CONTRACT = "ComputeLeases"

LeaseLeaf = tuple[str, int, int]
"""(lease id 0x-hex, cumulative wei, through round): one lease leaf of a settlement."""


@dataclass(frozen=True)
class LeaseTerms:
    """A lease as ``LeaseOpened`` said (indexed at the confirmation depth)."""

    lease_id: str
    run_id: str
    node: str
    organiser: str
    wei_per_round: int
    start_round: int
    end_round: int
    escrow: int
    block_number: int

    def as_json(self) -> dict[str, object]:
        return {
            "lease_id": self.lease_id,
            "run_id": self.run_id,
            "node": self.node,
            "organiser": self.organiser,
            "wei_per_round": str(self.wei_per_round),
            "start_round": self.start_round,
            "end_round": self.end_round,
            "escrow": str(self.escrow),
            "block_number": self.block_number,
        }


def contract_address(deployment: Deployment) -> Address | None:
    """The deployment's ComputeLeases, or None (an older deployment: no lease leaves)."""
    return deployment.address(CONTRACT) if CONTRACT in deployment.contracts else None


def lease_terms(
    session: Session, lease_id: str | None = None, *, run_id: str | None = None
) -> list[LeaseTerms]:
    """Every indexed lease (or the one ``lease_id``, or those of ``run_id``), oldest first."""
    query = select(FundingEvent).where(
        FundingEvent.contract == CONTRACT, FundingEvent.name == "LeaseOpened"
    )
    if lease_id is not None:
        query = query.where(FundingEvent.ref == lease_id.lower())
    if run_id is not None:
        query = query.where(FundingEvent.run_id == run_id)
    rows = session.exec(
        query.order_by(col(FundingEvent.block_number), col(FundingEvent.log_index))
    ).all()
    out = []
    for row in rows:
        args = json.loads(row.args)
        out.append(
            LeaseTerms(
                lease_id=str(row.ref),
                run_id=str(row.run_id),
                node=str(args["node"]),
                organiser=str(args["organiser"]),
                wei_per_round=int(args["weiPerRound"]),
                start_round=int(args["startRound"]),
                end_round=int(args["endRound"]),
                escrow=int(args["escrow"]),
                block_number=row.block_number,
            )
        )
    return out


def completed_rounds(session: Session, lease: LeaseTerms, through: int) -> int:
    """Rounds of the lease's window, up to ``through``, in which its node's attestation was
    verified (one per round: ``uq_attestation_slot``)."""
    last = min(through, lease.end_round)
    if last < lease.start_round:
        return 0
    return int(
        session.exec(
            select(func.count())
            .select_from(Attestation)
            .where(
                Attestation.run_id == lease.run_id,
                Attestation.node == lease.node,
                col(Attestation.verified).is_(True),
                col(Attestation.round) >= lease.start_round,
                col(Attestation.round) <= last,
            )
        ).one()
    )


def lease_leaves(session: Session, run_id: str, round_: int) -> list[LeaseLeaf]:
    """The lease leaves of the settlement of (``run_id``, ``round_``): one per indexed lease of
    that run, through ``round_``. Leases of other runs ride in their own runs' roots (every
    final root stays claimable), so each root's leaves depend only on its run, its round and
    the leases indexed, and anyone can rebuild them (``coloco watch``)."""
    out: list[LeaseLeaf] = []
    for lease in lease_terms(session, run_id=run_id):
        wei = lease.wei_per_round * completed_rounds(session, lease, round_)
        out.append((lease.lease_id, wei, round_))
    return out


def leaves_json(leaves: list[LeaseLeaf]) -> str | None:
    return json.dumps([[i, str(w), t] for i, w, t in leaves]) if leaves else None


def leaves_of(text: str | None) -> list[LeaseLeaf]:
    return [(str(i), int(w), int(t)) for i, w, t in json.loads(text)] if text else []


def leaf_hashes(contract: Address | None, leaves: list[LeaseLeaf]) -> list[Bytes32]:
    """The leaves' hashes in the rewards tree (none without a ComputeLeases)."""
    if contract is None:
        return []
    return [lease_leaf_hash(contract, bytes.fromhex(i[2:]), w, t) for i, w, t in leaves]


def leased_offers(session: Session, run_id: str, round_: int) -> dict[str, float]:
    """node -> offered FLOP/s (per device x devices) of the nodes leased in ``round_`` of the
    run that hold an offer (node addresses lower-cased)."""
    terms = lease_terms(session, run_id=run_id)
    nodes = {t.node for t in terms if t.start_round <= round_ <= t.end_round}
    if not nodes:
        return {}
    # both addresses as the chain and the offer's intake wrote them (checksummed); the book may
    # hold thousands of offers, so only the leased nodes' rows are read
    spellings = {n for node in nodes for n in (node, to_checksum_address(node))}
    return {
        o.node.lower(): float(int(o.flops) * int(o.device_count))
        for o in session.exec(select(MarketOffer).where(col(MarketOffer.node).in_(spellings)))
    }
