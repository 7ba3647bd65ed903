"""After each round: commit to the pseudo-gradient, sign a ComputeAttestation, submit it.

The pseudo-gradient blob (:mod:`reference.commitment`: the node's own ``base - local`` exactly as it
entered the all-reduce, int8 codes + scales in the int8 wire format, so it costs what one
all-reduce packet costs) is uploaded first; its canonical hash is the attestation's
``pseudoGradient``, so the ledger can check the commitment against the bytes, decode and score
them, and replay the round's weighted average.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from torch import Tensor

from protocol.attestation import ATTESTATION_ATTRS, ComputeAttestation
from protocol.blob_auth import UploadSigner
from protocol.blobs import encode_blob
from protocol.eip712 import Eip712Domain
from protocol.errors import AttestationRejected, LedgerUnavailableError
from protocol.hashing import hash_state_dict
from protocol.join import RoundJoin
from protocol.keys import NodeKey
from protocol.types import Address, Bytes32, RoundNumber, RunId
from trainer.network.ledger_client import LedgerClient

log = logging.getLogger(__name__)

# The ledger's answer when a round lies beyond its window of open rounds: it has not yet committed
# the rounds before (a ledger slower than the trainers). Not a refusal of the work: wait for it.
LEDGER_BEHIND = "future_round"


@dataclass(frozen=True)
class WorkRecord:
    """What a node did in one round: exactly the numbers the attestation carries, less the run
    and the node (the attester's own), with the pseudo-gradient as tensors (hashed when signed).

    The fields are ``ATTESTATION_SPEC``'s, in struct order (checked below, at import)."""

    round: int
    config_version: int
    base_checkpoint: bytes
    pseudo_gradient: dict[str, Tensor]
    data_shard: bytes
    inner_steps: int
    tokens: int
    result_checkpoint: bytes


_ATTESTER_FIELDS = ("run_id", "node")  # the attester's, not the round's work
WORK_FIELDS = tuple(a for a in ATTESTATION_ATTRS if a not in _ATTESTER_FIELDS)
if tuple(f.name for f in fields(WorkRecord)) != WORK_FIELDS:
    raise TypeError(f"WorkRecord's fields must be the attestation's {WORK_FIELDS}, in order")


@dataclass(frozen=True)
class Signed:
    attestation: ComputeAttestation
    signature: bytes
    ledger_id: int | None


class Attester:
    """Signs with the node's hot key; submits when a ledger is configured."""

    def __init__(
        self,
        key: NodeKey,
        domain: Eip712Domain,
        run_id: bytes,
        ledger: LedgerClient | None,
        *,
        behind_wait_s: float = 600.0,
        behind_poll_s: float = 0.5,
    ) -> None:
        self.key = key
        self.behind_wait_s = behind_wait_s  # how long a node waits for a ledger behind it
        self.behind_poll_s = behind_poll_s
        self.domain = domain
        self.run_id = run_id
        self.ledger = ledger
        if ledger is not None and ledger.uploader is None:  # blob uploads signed by this node
            ledger.uploader = UploadSigner(key.private_key, domain)
        self.backlog: list[_Pending] = []

    @property
    def address(self) -> str:
        return str(self.key.address)

    def attestation(self, work: WorkRecord) -> ComputeAttestation:
        values: dict[str, Any] = {name: getattr(work, name) for name in WORK_FIELDS}
        values["pseudo_gradient"] = Bytes32(bytes(hash_state_dict(work.pseudo_gradient)))
        return ComputeAttestation(run_id=RunId(self.run_id), node=self.key.address, **values)

    def join(self, round: int) -> bool:
        """Sign and post this node's join of ``round`` (the ledger's membership). False when the
        ledger refused it (the round already started: take part from the next round)."""
        if self.ledger is None:
            return True
        join = RoundJoin(RunId(self.run_id), RoundNumber(round), self.key.address)
        signature = self.key.sign_digest(join.digest(self.domain))
        deadline = time.monotonic() + self.behind_wait_s
        while True:
            try:
                self.ledger.join_round(join, signature)
            except AttestationRejected as exc:
                if exc.code == LEDGER_BEHIND and time.monotonic() < deadline:
                    # the ledger has not committed the rounds before this one: training ahead
                    # of it would only produce work it refuses, so wait (backpressure)
                    log.info("round %d: waiting for the ledger to commit earlier rounds", round)
                    time.sleep(self.behind_poll_s)
                    continue
                log.warning("round %d: the ledger refused the join (%s)", round, exc.message)
                return exc.code not in ("round_started", "round_closed", "stale_round")
            except LedgerUnavailableError as exc:
                log.warning(
                    "round %d: join not recorded, ledger unreachable: %s", round, exc.message
                )
            return True

    def publish(
        self, work: WorkRecord, round_members: Sequence[str], commits: Sequence[str] = ()
    ) -> Signed:
        """Sign; submit (after any backlog) with the members' signed packet commitments
        (``commits``, wire form: trainer.round.commits). A ledger outage keeps the round in the
        backlog (retried after the next round) instead of stopping the node; a refusal raises."""
        att = self.attestation(work)
        signature = self.key.sign_attestation(att, self.domain)
        item = _Pending(att, signature, encode_blob(work.pseudo_gradient),
                        [str(Address(m)) for m in round_members], list(commits))  # fmt: skip
        if self.ledger is None:
            return Signed(att, signature, None)
        self.backlog.append(item)
        ids = self.flush()
        return Signed(att, signature, ids.get(work.round))

    def drain(self) -> None:
        """Flush until the backlog is empty or ``behind_wait_s`` passed (a node that leaves gives a
        ledger that is behind, or briefly unreachable, time to take its last attestations)."""
        deadline = time.monotonic() + self.behind_wait_s
        self.flush()
        while self.backlog and time.monotonic() < deadline:
            time.sleep(self.behind_poll_s)
            self.flush()

    def flush(self) -> dict[int, int]:
        """Submit the backlog in round order; returns {round: ledger id} of what went through."""
        assert self.ledger is not None
        done: dict[int, int] = {}
        while self.backlog:
            item = self.backlog[0]
            try:
                self.ledger.put_blob(item.attestation.pseudo_gradient, item.blob)
                ledger_id = self.ledger.submit_attestation(
                    item.attestation, item.signature, item.members, item.commits
                )
            except LedgerUnavailableError as exc:
                log.warning("ledger unreachable, %d attestation(s) kept for later: %s",
                            len(self.backlog), exc.message)  # fmt: skip
                break
            except AttestationRejected as exc:
                if exc.code != LEDGER_BEHIND:
                    raise
                log.warning("the ledger is behind, %d attestation(s) kept for later: %s",
                            len(self.backlog), exc.message)  # fmt: skip
                break
            self.backlog.pop(0)
            done[item.attestation.round] = ledger_id
            log.info("round %d attestation accepted by the ledger (id %d)",
                     item.attestation.round, ledger_id)  # fmt: skip
        return done


@dataclass(frozen=True)
class _Pending:
    attestation: ComputeAttestation
    signature: bytes
    blob: bytes
    members: list[str]
    commits: list[str]
