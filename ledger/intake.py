"""Accepting attestations: level 0 checks, then one row per (run, round, node), idempotently.

One lock serialises "is the round still open? insert" against the lifecycle closing rounds, so
no attestation slips into a round after it was scored. Rejections are stored (audit trail).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Engine
from sqlmodel import Session, select

from ledger.core.config import Settings
from ledger.indexer import ChainSnapshot, Indexer
from ledger.models import Attestation, Rejection, RoundState, utcnow
from ledger.schemas import AttestationIn
from ledger.verify import Checked, check_chain, check_form, http_status, reject
from protocol.errors import AttestationRejected

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    """Result of one submission: an id (accepted) or an error code and message."""

    status: int
    id: int | None = None
    code: str | None = None
    message: str | None = None


class Intake:
    def __init__(self, engine: Engine, indexer: Indexer, settings: Settings) -> None:
        self.engine = engine
        self.indexer = indexer
        self.settings = settings
        self.lock = threading.Lock()
        self.round_states: dict[tuple[str, int], str] = {}

    @property
    def snapshot(self) -> ChainSnapshot:
        return self.indexer.snapshot

    def submit(self, items: list[AttestationIn]) -> list[Outcome]:
        """Verify and store ``items`` (one transaction); an outcome per item, in order."""
        domain = self.indexer.chain.domain
        snap = self.snapshot
        pre: list[Checked | Outcome] = []
        rejections: list[Rejection] = []
        for item in items:
            try:
                checked = check_form(item, domain)
                check_chain(checked, snap, round_window=self.settings.round_window)
                pre.append(checked)
            except AttestationRejected as exc:
                pre.append(Outcome(http_status(exc.code), code=exc.code, message=exc.message))
                rejections.append(_rejection(item, exc))
        with self.lock, Session(self.engine, expire_on_commit=False) as session:
            out: list[Outcome | int] = []  # an int refers to an earlier item of this batch
            new_rows: list[tuple[int, Attestation]] = []
            seen: dict[tuple[str, int, str], tuple[int, str]] = {}
            for item, result in zip(items, pre, strict=True):
                if isinstance(result, Outcome):
                    out.append(result)
                    continue
                try:
                    outcome, row = self._place(session, result, seen, len(out))
                except AttestationRejected as exc:
                    rejections.append(_rejection(item, exc, result))
                    out.append(Outcome(http_status(exc.code), code=exc.code, message=exc.message))
                    continue
                if row is not None:
                    new_rows.append((len(out), row))
                out.append(outcome)
            session.add_all(rejections)
            session.flush()
            for index, row in new_rows:
                assert row.id is not None
                out[index] = Outcome(202, id=row.id)
            session.commit()
        return [out[o] if isinstance(o, int) else o for o in out]  # type: ignore[misc]

    def _place(
        self,
        session: Session,
        checked: Checked,
        seen: dict[tuple[str, int, str], tuple[int, str]],
        index: int,
    ) -> tuple[Outcome | int, Attestation | None]:
        att = checked.attestation
        run = checked.run_hex
        key = (run, att.round)
        state = self.round_states.get(key)
        if state is None:
            state = self._open_round(session, run, att.round)
        if state != "open":
            raise reject(
                "round_closed",
                f"round {att.round} of run {run} is {state}: it no longer takes attestations",
            )
        slot = (run, att.round, att.node)
        digest_hex = "0x" + checked.digest.hex()
        earlier = seen.get(slot)  # the same slot earlier in this batch
        if earlier is not None and earlier[1] == digest_hex:
            return earlier[0], None
        existing = session.exec(
            select(Attestation.id, Attestation.digest).where(
                Attestation.run_id == run,
                Attestation.round == att.round,
                Attestation.node == att.node,
            )
        ).first()
        if earlier is not None or existing is not None:
            if existing is not None and existing[1] == digest_hex:
                return Outcome(202, id=existing[0]), None
            raise reject(
                "conflicting_attestation",
                f"node {att.node} already attested round {att.round} of run {run} with "
                "different fields: one attestation per node per round",
            )
        if att.tokens >= 1 << 63 or att.config_version >= 1 << 63:
            raise reject("invalid_field", "tokens/configVersion: implausibly large (>= 2**63)")
        row = Attestation(
            run_id=run,
            round=att.round,
            node=att.node,
            config_version=att.config_version,
            base_checkpoint="0x" + att.base_checkpoint.hex(),
            pseudo_gradient="0x" + att.pseudo_gradient.hex(),
            data_shard="0x" + att.data_shard.hex(),
            inner_steps=att.inner_steps,
            tokens=att.tokens,
            result_checkpoint="0x" + att.result_checkpoint.hex(),
            digest=digest_hex,
            signature="0x" + checked.signature.hex(),
            members=json.dumps(list(checked.members)) if checked.members is not None else None,
        )
        session.add(row)
        seen[slot] = (index, digest_hex)
        return Outcome(202), row

    def _open_round(self, session: Session, run: str, round_: int) -> str:
        row = session.exec(
            select(RoundState).where(RoundState.run_id == run, RoundState.round == round_)
        ).first()
        if row is None:
            now = utcnow()
            row = RoundState(
                run_id=run,
                round=round_,
                opened_at=now,
                deadline_at=now + timedelta(seconds=self.settings.round_deadline_s),
            )
            session.add(row)
            session.flush()
            log.info("round %d of run %s opened", round_, run)
        self.round_states[(run, round_)] = row.state
        return row.state


def _rejection(
    item: AttestationIn, exc: AttestationRejected, checked: Checked | None = None
) -> Rejection:
    fields = item.attestation
    return Rejection(
        node=fields.node,
        run_id=fields.runId.lower(),
        round=str(fields.round),
        code=exc.code,
        message=exc.message,
        digest="0x" + checked.digest.hex() if checked is not None else None,
    )
