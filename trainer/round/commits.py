"""Signed packet commitments: the all-reduce uses no peer's packet it cannot hold that peer to.

Before the exchange every member posts a signed ``COMMIT`` (protocol.coordination.Kind.COMMIT)
naming the commitment hash of the packet it feeds the all-reduce and its all-reduce weight: the
``pseudoGradient`` and ``tokens`` its attestation of the round signs. :class:`PacketCheck` is the
all-reduce's ``check``: a peer's packet (or weight) that is not the one it signed, or a peer that
signed none within the wait, raises :class:`~protocol.errors.ForgedPacketError` naming it before
any value of the mean is used, and the round re-forms without it.

The signed commits of the round are kept (:attr:`PacketCheck.evidence`) and go to the ledger with
this node's attestation: a member that signs one packet here and attests another has signed two
different claims for the round, and the ledger fails it on its own signature
(ledger.judge.commits) instead of failing the members who averaged what it sent.
"""

from __future__ import annotations

import logging
import time

from protocol.coordination import Kind, SignedMessage
from protocol.errors import ForgedPacketError
from reference.codec import Packet
from reference.commitment import commitment_hash
from trainer.network.members import Members
from trainer.network.membership import Rendezvous

log = logging.getLogger(__name__)

_POLL_S = 0.05


def commit_key(round: int, attempt: int, node: str) -> str:
    return f"commit/{round}/{attempt}/{node}"


def post_commit(rdv: Rendezvous, members: Members, packet: Packet, tokens: int) -> SignedMessage:
    """Sign and post this node's commitment to ``packet`` (and its all-reduce weight,
    ``tokens``) for the round's attempt."""
    r, a = members.round, members.attempt
    key = commit_key(r, a, rdv.address)
    digest = "0x" + commitment_hash(packet).hex()
    body = {"pseudoGradient": digest, "tokens": int(tokens)}
    signed = rdv.board.post(key, Kind.COMMIT, r, a, body)
    rdv.keep(key, signed.to_wire(), "commit/", r)  # re-posted at a successor if the host dies
    return signed


class PacketCheck:
    """``check(src, packet)`` for :func:`trainer.network.allreduce.average` over ``members``."""

    def __init__(self, rdv: Rendezvous, members: Members, wait_s: float) -> None:
        self.rdv = rdv
        self.members = members
        self.wait_s = wait_s
        self.evidence: dict[str, SignedMessage] = {}
        """The members' signed commits read so far (this node's own included once posted)."""

    def _commit_of(self, node: str) -> SignedMessage | None:
        if node in self.evidence:
            return self.evidence[node]
        r, a = self.members.round, self.members.attempt
        deadline = time.monotonic() + self.wait_s
        while True:
            msg = self.rdv.board.read(commit_key(r, a, node), Kind.COMMIT, r, a, signer=node)
            if msg is not None:
                self.evidence[node] = msg
                return msg
            if time.monotonic() >= deadline:
                return None
            time.sleep(_POLL_S)

    def name_of(self, src: int) -> str:
        """Rank ``src``'s node address (how a refusal names it)."""
        return self.members.addresses[src]

    def __call__(self, src: int, packet: Packet, weight: int | None) -> None:
        node = self.members.addresses[src]
        msg = self._commit_of(node)
        r = self.members.round
        if msg is None:
            raise ForgedPacketError(
                (node,),
                f"round {r}: {node} signed no commitment to its packet within {self.wait_s:g}s; "
                "its packet is not used and the round re-forms without it",
            )
        body = msg.body()
        signed = str(body.get("pseudoGradient", ""))
        got = "0x" + commitment_hash(packet).hex()
        if weight is not None and body.get("tokens") != weight:
            raise ForgedPacketError(
                (node,),
                f"round {r}: {node} weighs its packet {weight} in the all-reduce but signed "
                f"{body.get('tokens')!r} tokens: not used; the round re-forms without it",
            )
        if signed != got:
            self.rdv.board.refuse("forged_packet", commit_key(r, self.members.attempt, node),
                                  f"packet hashes to {got}, signed {signed}")  # fmt: skip
            raise ForgedPacketError(
                (node,),
                f"round {r}: the packet {node} sent hashes to {got[:18]}.. but it signed "
                f"{signed[:18]}..: not used; the round re-forms without it",
            )

    def wires(self) -> list[str]:
        """The signed commits, as the ledger takes them (sorted by signer)."""
        return [self.evidence[a].to_wire().decode() for a in sorted(self.evidence)]
