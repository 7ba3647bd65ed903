"""The checkpoint board: who holds which weights after a round, and where to fetch them.

After a round every member posts a signed ``CHECKPOINT`` under ``ckpt/<round>/sig/<address>``:
the weights hash it holds, and the manifest and address of the blob it serves peer to peer
(:mod:`trainer.network.peer_checkpoint`); no blob goes through the store. Rank 0 also posts it
under ``ckpt/latest``, the hint a starting node reads first: it believes it only when signed by
a member of that round's signed round-open, and, with a chain, for a round no later than the
chain's last committed round plus the ledger's round window (:meth:`Recovery.initial`). A joiner
accepts a blob only if it matches the hash committed on chain or, for a round not committed yet,
the hash signed by a strict majority of that round's members (:meth:`CheckpointBoard.signed_hash`;
:mod:`trainer.round.recovery` does the fetching and checking), and fetches a member's blob only
from the endpoint that member announced in its signed join of the round
(:meth:`CheckpointBoard.endpoint_of`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from protocol.coordination import Kind
from trainer.network.coordination.board import Board
from trainer.network.failover import KeptValues
from trainer.network.members import Members

MembersOf = Callable[[int], Members | None]
"""The member list of a round (its latest opened attempt), as the rendezvous reads it."""


class CheckpointBoard:
    """One node's signed checkpoint offers, and its reads of the others'."""

    def __init__(self, board: Board, kept: KeptValues, members_of: MembersOf) -> None:
        self.board = board
        self.kept = kept
        self.members_of = members_of
        self.serving = ""
        """Where this node serves its checkpoints (the ``serve`` of its last offer): its next
        joins announce it, and joiners fetch its blobs from nowhere else."""

    def refuse(self, check: str, key: str, detail: str) -> None:
        """Log and keep a refusal (a bad offer or chunk) beside the board's other refusals."""
        self.board.refuse(check, key, detail)

    def publish(
        self,
        round: int,
        attempt: int,
        rank: int,
        weights_hash: bytes,
        offer: dict[str, Any] | None = None,
    ) -> None:
        """Sign the hash this node holds after ``round`` and, in ``offer``, the manifest of the
        blob it serves peer to peer and where (:mod:`trainer.network.peer_checkpoint`)."""
        key = f"ckpt/{round}/sig/{self.board.address}"
        signed = self.board.post(key, Kind.CHECKPOINT, round, attempt,
                                 (offer or {}) | {"hash": weights_hash.hex()})  # fmt: skip
        serve = (offer or {}).get("serve")
        if isinstance(serve, str):
            self.serving = serve
        self.kept.keep(key, signed.to_wire(), "ckpt/", round)
        if rank == 0:
            self.kept.set("ckpt/latest", signed.to_wire())

    def latest_round(self) -> int | None:
        """The round of the signed ``ckpt/latest`` (a hint; the hash is checked separately),
        taken only from a member of that round's signed round-open (a registered node cannot
        point joiners at a round it was not in; the caller bounds the round by the chain)."""
        msg = self.board.read("ckpt/latest", Kind.CHECKPOINT, None, None)
        if msg is None:
            return None
        m = msg.message
        members = self.members_of(m.round)
        if members is None or m.node not in members.addresses:
            self.refuse("not_member", "ckpt/latest", f"signed by {m.node} for round {m.round}, "
                        "of which it is no member (no signed round-open lists it)")  # fmt: skip
            return None
        return m.round

    def offers(self, round: int) -> list[tuple[str, dict[str, Any]]]:
        """(address, signed body) of each member of ``round`` that signed a ``CHECKPOINT``."""
        members = self.members_of(round)
        if members is None:
            return []
        out = []
        for addr in members.addresses:
            msg = self.board.read(f"ckpt/{round}/sig/{addr}", Kind.CHECKPOINT, round,
                                  members.attempt, signer=addr)  # fmt: skip
            if msg is not None:
                out.append((addr, msg.body()))
        return out

    def endpoint_of(self, round: int, address: str, body: dict[str, Any]) -> str | None:
        """Where ``address`` serves its checkpoint of ``round``: the offer's ``serve`` when it is
        the endpoint that member announced in its signed join of the round (its ``serve``; in a
        join that announced none, the host of its successor ``endpoint``), else None (refused
        as ``wrong_endpoint``: a signed offer cannot point joiners at any other host and port).
        A join that announced neither (a node's first round, without a successor endpoint)
        leaves the offer's own ``serve``."""
        serve = body.get("serve")
        members = self.members_of(round)
        if not isinstance(serve, str) or members is None or address not in members.addresses:
            return None
        i = members.rank_of(address)
        announced = members.serves[i] if i < len(members.serves) else ""
        endpoint = members.endpoints[i] if i < len(members.endpoints) else ""
        if announced:
            ok, named = serve == announced, f"announced {announced!r}"
        elif endpoint:
            host = endpoint.rpartition(":")[0]
            ok, named = serve.rpartition(":")[0] == host, f"announced host {host!r}"
        else:
            return serve
        if not ok:
            self.refuse("wrong_endpoint", f"ckpt/{round}/sig/{address}", f"offer serves from "
                        f"{serve!r}, but its signed join of round {round} {named}")  # fmt: skip
            return None
        return serve

    def signed_hash(self, round: int) -> bytes | None:
        """The weights hash signed by a strict majority of ``round``'s members, or None."""
        members = self.members_of(round)
        if members is None:
            return None
        votes = Counter(str(body.get("hash", "")) for _, body in self.offers(round))
        if not votes:
            return None
        best, count = votes.most_common(1)[0]
        if 2 * count <= len(members.addresses):
            return None
        try:
            return bytes.fromhex(best)
        except ValueError:
            return None
