"""A failed audit ends in a slash proposal: the ledger's slasher key proposes it on chain.

Each fraud record (``ledger.judge.fraud``: a replay that did not match, with its evidence and the
reward it withheld) is sent once as ``StakeManager.proposeSlash(node, amount, evidenceHash,
reporter=0)``: ``evidenceHash`` is the record's keccak of its evidence JSON (``GET /v1/frauds``
serves the evidence, so anyone can check the hash and replay it), ``amount`` is ``SLASH_BPS`` of
the node's stake and unbonding stake at that moment. The node freezes at once (no unstake,
withdraw or key rotation); during ``slashDisputeWindow`` the guardian or governance may veto;
after it anyone executes it. The record keeps the proposal's transaction hash (``slash_tx``).

The key needs StakeManager's ``SLASHER_ROLE``, which only governance grants (a Timelock
``grantRole``); without a key (``COLOCO_LEDGER_SLASHER_KEYSTORE``) fraud records stay records.
Threat model: docs/ledger.md, "Slash proposals".

Sent at most once per record: before proposing, the node's ``SlashProposed`` events are searched
for the record's evidence hash, so a ledger that crashed between the transaction and saving its
hash adopts the proposal it already made instead of freezing the node twice.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from ledger.core.models import FraudRecord
from ledger.core.retry import Backoff
from protocol.errors import ChainError, ContractRevertError
from protocol.types import Address

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

ZERO_ADDRESS = "0x" + "00" * 20
BPS = 10_000


class SlashError(ChainError):
    """A slash proposal could not be sent (retried with backoff; ``/v1/health`` reports it)."""


class FraudSlasher:
    """Turns fraud records without a ``slash_tx`` into slash proposals (one pass per tick)."""

    def __init__(self, engine: Engine, client: ChainClient, *, slash_bps: int) -> None:
        if client.account is None:
            raise ValueError("the slasher's chain client needs the slasher account")
        self.engine = engine
        self.client = client
        self.slash_bps = slash_bps
        self.address = client.account.address
        self.backoff = Backoff("slash proposal of fraud record")

    def tick(self) -> list[str]:
        """Propose a slash for every fraud record that has none; their transaction hashes."""
        with Session(self.engine) as session:
            pending = session.exec(
                select(FraudRecord)
                .where(col(FraudRecord.slash_tx).is_(None))
                .order_by(col(FraudRecord.id))
            ).all()
        sent: list[str] = []
        for record in pending:  # each on its own, failures retried with backoff
            if not self.backoff.due(record.id):
                continue
            try:
                tx = self._propose(record)
            except Exception as exc:
                self.backoff.failed(record.id, exc)
                continue
            self.backoff.succeeded(record.id)
            if tx is not None:
                sent.append(tx)
        if self.backoff.failures:
            first = next(iter(self.backoff.failures.values()))
            raise SlashError(
                f"{len(self.backoff.failures)} slash proposal(s) failing: {first.error}"
            )
        return sent

    def _propose(self, record: FraudRecord) -> str | None:
        node_id = self.client.stake_manager.node_id_of(Address(record.node))
        if node_id == 0:
            log.warning("fraud record %s: node %s is not registered", record.id, record.node)
            return None
        tx = self._already_proposed(node_id, record.evidence_hash)
        if tx is None:
            info = self.client.node_info(Address(record.node))
            stake = int(info.staked) + int(info.unbonding)
            amount = stake * self.slash_bps // BPS
            if amount == 0:
                log.warning("fraud record %s: node %s has no stake", record.id, record.node)
                return None
            evidence = bytes.fromhex(record.evidence_hash[2:])
            try:
                receipt = self.client.transact(
                    "StakeManager", "proposeSlash", record.node, amount, evidence, ZERO_ADDRESS
                )
            except ContractRevertError as exc:
                raise SlashError(
                    f"proposeSlash for fraud record {record.id} reverted ({exc}): does "
                    f"{self.address} hold StakeManager's SLASHER_ROLE? (governance grants it)"
                ) from exc
            tx = "0x" + bytes(receipt["transactionHash"]).hex()
            log.warning(
                "slash proposed for node %s (round %d of run %s): %d wei, evidence %s, tx %s",
                record.node,
                record.round,
                record.run_id,
                amount,
                record.evidence_hash,
                tx,
            )
        with Session(self.engine) as session:
            row = session.get(FraudRecord, record.id)
            if row is not None and row.slash_tx is None:
                row.slash_tx = tx
                session.add(row)
                session.commit()
        return tx

    def _already_proposed(self, node_id: int, evidence_hash: str) -> str | None:
        """The transaction of an earlier ``SlashProposed`` of this node with this evidence."""
        event: Any = self.client.contract("StakeManager").events.SlashProposed()
        start = int(self.client.deployment.deployment_block)
        logs = self.client.rpc(
            lambda: event.get_logs(from_block=start, argument_filters={"nodeId": node_id}),
            "StakeManager.SlashProposed logs",
        )
        for entry in logs:
            if "0x" + bytes(entry["args"]["evidenceHash"]).hex() == evidence_hash:
                return "0x" + bytes(entry["transactionHash"]).hex()
        return None
