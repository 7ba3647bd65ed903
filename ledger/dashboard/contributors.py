"""The dashboard's capital and code contributors: who backed a run or submitted code, and their
receipts, from the ledger's indexed tables only (ledger/reads/receipts.py; no RPC per page)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from ledger.core.models import FundingEvent, Run
from ledger.reads.receipts import as_of, capital_receipts, code_receipts

_KIND_OF = {"Deposited": "capital", "Submitted": "code"}


def contributors(engine: Engine) -> dict[str, Any]:
    """Every backer and code contributor with its totals: wei deposited, contributions
    submitted, approved and their tokens."""
    with Session(engine) as session:
        rows = session.exec(
            select(FundingEvent.account, FundingEvent.name)
            .where(col(FundingEvent.name).in_(tuple(_KIND_OF)))
            .distinct()
        ).all()
        out: dict[str, dict[str, Any]] = {}
        for account, name in rows:
            if account is None:
                continue
            entry = out.setdefault(account, {"address": account, "kinds": []})
            entry["kinds"] = sorted({*entry["kinds"], _KIND_OF[name]})
        for entry in out.values():
            summary = _summary(session, entry["address"])
            entry.update(summary)
        block, when = as_of(session)
    listed = sorted(out.values(), key=lambda e: (-int(e["deposited_wei"]), e["address"]))
    return {"contributors": listed, "as_of": {"block": block, "time": when}}


def _summary(session: Session, address: str) -> dict[str, Any]:
    capital = capital_receipts(session, address)
    code = code_receipts(session, address)
    approved = [c for c in code if c["status"] in ("approved", "claimed")]
    return {
        "deposited_wei": str(sum(int(c["deposited_wei"]) for c in capital)),
        "capital_entitlement": str(sum(int(c["entitlement"]) for c in capital)),
        "code_submitted": len(code),
        "code_approved": len(approved),
        "code_tokens": str(sum(int(c["amount"]) for c in approved)),
    }


def contributor_detail(engine: Engine, address: str) -> dict[str, Any]:
    """One address's capital receipts (per run backed) and code receipts (per contribution),
    each with its run's name where the ledger knows it."""
    with Session(engine) as session:
        block, when = as_of(session)
        names = dict(session.exec(select(Run.run_id, Run.name)).all())
        capital = capital_receipts(session, address)
        code = code_receipts(session, address)
    for row in (*capital, *code):
        row["run_name"] = names.get(str(row["run_id"]).lower())
    return {
        "address": address,
        "capital": capital,
        "code": code,
        "as_of": {"block": block, "time": when},
    }
