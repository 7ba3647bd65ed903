"""After each round: commit to the pseudo-gradient, sign a ComputeAttestation, submit it.

The pseudo-gradient blob (:mod:`reference.commitment`: the node's own ``base - local`` exactly as it
entered the all-reduce, int8 codes + scales in the int8 wire format, so it costs what one
all-reduce packet costs) is uploaded first; its canonical hash is the attestation's
``pseudoGradient``, so the ledger can check the commitment against the bytes, decode and score
them, and replay the round's weighted average.

Nothing signed is lost: each attestation goes to the node's journal on disk
(:mod:`trainer.round.journal`) before it is sent, and leaves it only once the ledger acknowledged
it; the journal is sent, in round order, before every join (so a ledger that is behind because of
this node's own unsent rounds gets them first) and first thing after a restart.

``background``: :meth:`Attester.publish` journals and returns; a sender thread uploads the packet
and submits (the node's default, trainer.round.node: the upload is a packet's bytes, 0.85 s at
10 Mbit/s, which the inner steps would otherwise wait for at every landing). The journal is on
disk before the call returns, so nothing is lost to a crash. A refusal the sender meets is raised
on the caller's thread at its next publish, and by any later flush (a join's, a drain's): the
refused round stays at the front of the backlog.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from torch import Tensor

from protocol.attestation import ATTESTATION_ATTRS, ComputeAttestation
from protocol.blob_auth import UploadSigner
from protocol.blobs import encode_blob
from protocol.eip712 import Eip712Domain
from protocol.errors import AttestationRejected, ConfigError, LedgerUnavailableError
from protocol.hashing import hash_state_dict
from protocol.join import RoundJoin
from protocol.keys import NodeKey
from protocol.types import Address, Bytes32, RoundNumber, RunId
from trainer.network.ledger_client import LedgerClient
from trainer.round.journal import Journal, Pending

log = logging.getLogger(__name__)

# The ledger's answer when a round lies beyond its window of open rounds: it has not yet committed
# the rounds before (a ledger slower than the trainers). Not a refusal of the work: wait for it.
LEDGER_BEHIND = "future_round"
LOST_CODES = frozenset({"round_closed", "stale_round", "run_closed", "not_a_member", "no_show"})
"""Refusals that no later retry can turn around: the round went on (or the run ended) without
this attestation. The round is recorded as lost (:meth:`Journal.lost`) and the node goes on."""


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
    trace_root: bytes


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
        journal: Journal | None = None,
        outage_wait_s: float = 600.0,
        background: bool = False,
    ) -> None:
        """``journal``: where signed attestations wait for the ledger (None: in memory only);
        what it holds from an earlier start is sent first. ``outage_wait_s``: how long a join
        waits for an unreachable ledger before the node stops (exit 4). ``background``: submit
        from a sender thread (module docstring)."""
        self.key = key
        self.behind_wait_s = behind_wait_s  # how long a node waits for a ledger behind it
        self.behind_poll_s = behind_poll_s
        self.domain = domain
        self.run_id = run_id
        self.ledger = ledger
        if ledger is not None and ledger.uploader is None:  # blob uploads signed by this node
            ledger.uploader = UploadSigner(key.private_key, domain)
        self.outage_wait_s = outage_wait_s
        self.on_outage: Callable[[], None] | None = None
        """Called once per join, when the ledger first does not answer it, before the wait (the
        node lands the round it has in flight, so its attestation is journaled:
        trainer.round.node)."""
        self.backlog: list[Pending] = []
        self.lost: dict[int, str] = {}
        """Rounds the ledger refused for good in this session (round: its reason)."""
        self.acknowledged: dict[int, int] = {}
        """Rounds the ledger took in this session (round: its ledger id)."""
        self.background = background
        self.retry_s = 5.0  # the sender's next try while the ledger does not take the backlog
        self._state = threading.Lock()  # the backlog and the journal, between requests
        self._sending = threading.Lock()  # one flush at a time
        self._wake = threading.Event()
        self._sender: threading.Thread | None = None
        self._closing = False
        self._failed: BaseException | None = None
        self.journal: Journal | None = None
        if journal is not None:
            self.use_journal(journal)

    def use_journal(self, journal: Journal) -> None:
        """Keep signed attestations in ``journal`` from now on; what it holds from an earlier
        start (this node's, this run's) goes first."""
        held = journal.pending()
        owner = (str(self.key.address), bytes(self.run_id))
        foreign = [p.round for p in held
                   if (str(p.attestation.node), bytes(p.attestation.run_id)) != owner]  # fmt: skip
        if foreign:
            raise ConfigError(
                f"the journal {journal.path} holds rounds {foreign} of another node or run: give "
                "each run and node key its own checkpoint folder (--checkpoint-dir)"
            )
        self.journal = journal
        mine = {p.round for p in self.backlog}
        self.backlog = sorted(self.backlog + [p for p in held if p.round not in mine],
                              key=lambda p: p.round)  # fmt: skip
        if held:
            log.warning("journal %s: rounds %s signed and not acknowledged yet; sending them first",
                        journal.path, [p.round for p in held])  # fmt: skip

    def unsent(self) -> list[int]:
        """The rounds signed and not acknowledged by the ledger yet, in order."""
        return [p.round for p in self.backlog]

    @property
    def address(self) -> str:
        return str(self.key.address)

    def attestation(self, work: WorkRecord) -> ComputeAttestation:
        values: dict[str, Any] = {name: getattr(work, name) for name in WORK_FIELDS}
        values["pseudo_gradient"] = Bytes32(bytes(hash_state_dict(work.pseudo_gradient)))
        return ComputeAttestation(run_id=RunId(self.run_id), node=self.key.address, **values)

    def join(self, round: int) -> bool:
        """Sign and post this node's join of ``round`` (the ledger's membership). False when the
        ledger refused it (the round already started: take part from the next round).

        The journal goes first: a ledger that is behind may be behind for want of this node's
        own unsent rounds. While the ledger is behind, or unreachable, the node neither trains
        ahead (the ledger would refuse that work) nor gives up: it waits, sending its journal
        each time, ``behind_wait_s`` for a ledger that is behind (then trains: the attestation
        decides) and ``outage_wait_s`` for one that does not answer (then stops: exit 4)."""
        if self.ledger is None:
            return True
        join = RoundJoin(RunId(self.run_id), RoundNumber(round), self.key.address)
        signature = self.key.sign_digest(join.digest(self.domain))
        start = time.monotonic()
        told = False  # on_outage called in this join
        while True:
            if self.backlog:
                self.flush()
            try:
                self.ledger.join_round(join, signature)
            except AttestationRejected as exc:
                if exc.code == LEDGER_BEHIND and time.monotonic() - start < self.behind_wait_s:
                    # the ledger has not committed the rounds before this one: training ahead
                    # of it would only produce work it refuses, so wait (backpressure)
                    mine = f" (unsent here: {self.unsent()})" if self.backlog else ""
                    log.info("round %d: waiting for the ledger to commit earlier rounds%s",
                             round, mine)  # fmt: skip
                    time.sleep(self.behind_poll_s)
                    continue
                log.warning("round %d: the ledger refused the join (%s)", round, exc.message)
                return exc.code not in ("round_started", "round_closed", "stale_round")
            except LedgerUnavailableError as exc:
                if not told and self.on_outage is not None:
                    told = True  # once: what the node holds in flight lands during the wait
                    self.on_outage()
                waited = time.monotonic() - start
                if waited >= self.outage_wait_s:
                    raise LedgerUnavailableError(
                        f"the ledger did not answer for {waited:.0f}s ({exc.message}); unsent "
                        f"rounds {self.unsent()} stay in the journal and go first when the node "
                        "is started again: check --ledger-url and that the ledger is running"
                    ) from exc
                log.warning("round %d: ledger unreachable, waiting for it (%.0fs so far; "
                            "unsent rounds %s): %s", round, waited, self.unsent(),
                            exc.message)  # fmt: skip
                time.sleep(self.behind_poll_s)
                continue
            return True

    def publish(
        self, work: WorkRecord, round_members: Sequence[str], commits: Sequence[str] = ()
    ) -> Signed:
        """Sign; submit (after any backlog) with the members' signed packet commitments
        (``commits``, wire form: trainer.round.commits). A ledger outage keeps the round in the
        backlog (retried after the next round) instead of stopping the node; a refusal raises."""
        att = self.attestation(work)
        signature = self.key.sign_attestation(att, self.domain)
        item = Pending(att, signature, encode_blob(work.pseudo_gradient),
                       [str(Address(m)) for m in round_members], list(commits))  # fmt: skip
        if self.ledger is None:
            return Signed(att, signature, None)
        self._raise_failed()
        with self._state:  # never held across a request: this does not wait on the network
            if self.journal is not None:
                self.journal.add(item)  # on disk before the first try: a crash loses nothing
            self.backlog.append(item)
        if self.background:
            self._send_soon()
            return Signed(att, signature, None)
        ids = self.flush()
        return Signed(att, signature, ids.get(work.round))

    def _send_soon(self) -> None:
        if self._sender is None or not self._sender.is_alive():
            self._closing = False
            self._sender = threading.Thread(target=self._send, name="attest-sender", daemon=True)
            self._sender.start()
        self._wake.set()

    def _send(self) -> None:
        """The sender thread: flush when woken, and every ``retry_s`` while a backlog waits."""
        while not self._closing:
            self._wake.wait(self.retry_s if self.backlog else None)
            self._wake.clear()
            if self._closing:
                return
            try:
                self.flush()
            except BaseException as exc:  # a refusal: raised on the caller's thread next
                log.error("the attestation sender stopped: %s", exc)
                self._failed = exc
                return

    def _raise_failed(self) -> None:
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed

    def close(self) -> None:
        """Stop the sender thread (what it holds stays in the backlog and the journal)."""
        self._closing = True
        self._wake.set()
        if self._sender is not None:
            self._sender.join()
            self._sender = None

    def drain(self, wait_s: float | None = None) -> None:
        """Flush until the backlog is empty or ``wait_s`` (default ``behind_wait_s``) passed (a
        node that leaves gives a ledger that is behind, or briefly unreachable, time to take its
        last attestations)."""
        deadline = time.monotonic() + (self.behind_wait_s if wait_s is None else wait_s)
        self.flush()
        while self.backlog and time.monotonic() < deadline:
            time.sleep(self.behind_poll_s)
            self.flush()

    def flush(self) -> dict[int, int]:
        """Submit the backlog in round order; returns {round: ledger id} of what went through.
        One flush at a time (the caller's thread or the sender's); the backlog and the journal
        are held only between requests, so a publish never waits on the network."""
        assert self.ledger is not None
        done: dict[int, int] = {}
        with self._sending:
            while True:
                with self._state:
                    if not self.backlog:
                        break
                    item = self.backlog[0]  # (only a flush takes from the front)
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
                    if exc.code in LOST_CODES:
                        with self._state:
                            self._lose(item, exc.message)
                        continue
                    if exc.code != LEDGER_BEHIND:
                        raise
                    log.warning("the ledger is behind, %d attestation(s) kept for later: %s",
                                len(self.backlog), exc.message)  # fmt: skip
                    break
                with self._state:
                    self.backlog.pop(0)
                    if self.journal is not None:
                        self.journal.done(item.round)
                    done[item.attestation.round] = ledger_id
                    self.acknowledged[item.attestation.round] = ledger_id
                log.info("round %d attestation accepted by the ledger (id %d)",
                         item.attestation.round, ledger_id)  # fmt: skip
        return done

    def _lose(self, item: Pending, reason: str) -> None:
        self.backlog.pop(0)
        self.lost[item.round] = reason
        if self.journal is not None:
            self.journal.lost(item, reason)
        log.error("round %d is lost: the ledger refused its attestation for good (%s)",
                  item.round, reason)  # fmt: skip
