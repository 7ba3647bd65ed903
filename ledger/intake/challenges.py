"""The ledger's side of the timed hardware challenge (reference/challenge.py): issue, commit,
open, verdict.

1. **issue**: a registered node signs a claim (device kind and count, memory and FLOP/s per
   device, a fresh request nonce, an expiry); the ledger sizes the product to the claimed
   memory, draws a fresh seed, one nonce per device and a secret, and sets one deadline from
   the claimed throughput (all devices are challenged at once). One open challenge per node.
2. **commit**: each device's Merkle root of C, signed, must arrive by the deadline (the ledger's
   clock); the answer is that device's probe key, derived from the secret and the root, so the
   probe cannot be known before the commitment.
3. **open**: the probed rows of C, signed; checked by :func:`reference.challenge.verify`.

A device that misses its deadline, commits a wrong C or never opens fails the challenge. A
wrong answer is a misclaim at once; a timing failure (late, or no commitment by the deadline)
is one when a majority of the node's last ``VERDICT_TRIALS`` (3) decided challenges failed
(:func:`reference.challenge.majority_refused`: a single timed run on a loaded machine can be
late). A misclaim ends as a fraud record (run :data:`MARKET_RUN_ID`, round =
the challenge id, evidence = the claim, the challenge and each device's outcome), which the
slasher (ledger/chain/slash.py) turns into a slash proposal like a failed replay. A passed one
records the measured throughput (sum over devices of 2 n^2 m / seconds to commitment), the
memory per device it was sized to and the device count: what an offer carries.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import Connection
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from ledger.chain.indexer import ChainSnapshot
from ledger.core.models import FraudRecord, MarketChallenge, MarketChallengeDevice
from protocol import challenge_auth
from protocol.eip712 import Eip712Domain, keccak256, to_checksum_address
from protocol.errors import LedgerError
from reference import challenge as ch

MARKET_RUN_ID: Final = "0x" + hashlib.sha256(b"coloco.market.challenge").hexdigest()
"""The ``run_id`` of a failed challenge's fraud record (its ``round`` is the challenge id)."""
LATENCY_S: Final = 2.0
"""Network allowance added to every deadline."""
OPEN_WINDOW_S: Final = 120.0
"""How long after the deadline a committed device may still open (the root is already fixed)."""
MAX_VALIDITY_S: Final = 900
MAX_DEVICES: Final = 63


@dataclass(frozen=True)
class Claim:
    kind: str
    devices: int
    memory_bytes: int
    flops: int
    request: bytes
    expires: int

    def digest(self) -> bytes:
        return challenge_auth.claim_digest(
            kind=self.kind,
            devices=self.devices,
            memory_bytes=self.memory_bytes,
            flops=self.flops,
            request=self.request,
            expires=self.expires,
        )


def _refuse(code: str, message: str) -> LedgerError:
    return LedgerError(message, code=code)


def _load(session: Session, challenge_id: int) -> MarketChallenge:
    row = session.get(MarketChallenge, challenge_id)
    if row is None:
        raise _refuse("not_found", f"no challenge {challenge_id}: ask for one first")
    return row


def _devices(session: Session, challenge_id: int) -> list[MarketChallengeDevice]:
    return list(
        session.exec(
            select(MarketChallengeDevice)
            .where(MarketChallengeDevice.challenge_id == challenge_id)
            .order_by(col(MarketChallengeDevice.device))
        ).all()
    )


def issue(  # noqa: PLR0917 - a step's inputs
    session: Session,
    snapshot: ChainSnapshot,
    domain: Eip712Domain,
    node: str,
    claim: Claim,
    signature: str,
    now: datetime,
) -> tuple[MarketChallenge, list[MarketChallengeDevice]]:
    """A new challenge for ``node``'s signed ``claim`` (see the module docstring)."""
    addr = to_checksum_address(node)
    info = snapshot.nodes.get(addr)
    if info is None or not info.registered:
        raise _refuse("unregistered_node", f"node {addr} is not registered: register it first")
    stamp = now.timestamp()
    if not stamp < claim.expires <= stamp + MAX_VALIDITY_S:
        raise _refuse(
            "invalid_field",
            f"expires {claim.expires}: must be in the next {MAX_VALIDITY_S} s (now {int(stamp)})",
        )
    if not 1 <= claim.devices <= MAX_DEVICES:
        raise _refuse("invalid_field", f"devices {claim.devices}: between 1 and {MAX_DEVICES}")
    if claim.flops <= 0:
        raise _refuse("invalid_field", f"flops {claim.flops}: claim a positive FLOP/s per device")
    try:
        shape = ch.size(claim.memory_bytes, claim.kind)
    except ValueError as exc:
        raise _refuse("invalid_field", str(exc)) from None
    challenge_auth.check(domain, addr, "issue", 0, 0, claim.digest(), signature)
    for old in session.exec(
        select(MarketChallenge).where(
            MarketChallenge.node == addr, MarketChallenge.verdict == "open"
        )
    ).all():
        expire(session, old, now)
        if old.verdict == "open":
            raise _refuse(
                "challenge_open",
                f"challenge {old.id} of node {addr} is still open: answer it first",
            )
    request = "0x" + claim.digest().hex()
    if session.exec(select(MarketChallenge).where(MarketChallenge.request == request)).first():
        raise _refuse("challenge_replayed", "this signed request was used: sign a new one")
    deadline = ch.deadline_s(shape, claim.flops, latency_s=LATENCY_S)
    row = MarketChallenge(
        node=addr,
        request=request,
        kind=claim.kind,
        devices=claim.devices,
        memory_bytes=claim.memory_bytes,
        flops=claim.flops,
        n=shape.n,
        m=shape.m,
        seed="0x" + os.urandom(32).hex(),
        secret="0x" + os.urandom(32).hex(),
        slack=ch.SLACK,
        issued_at=now,
        deadline_at=now + timedelta(seconds=deadline),
    )
    session.add(row)
    session.flush()
    assert row.id is not None
    devices = [
        MarketChallengeDevice(challenge_id=row.id, device=d, nonce="0x" + os.urandom(32).hex())
        for d in range(claim.devices)
    ]
    session.add_all(devices)
    session.commit()
    return row, devices


def _device(session: Session, row: MarketChallenge, device: int) -> MarketChallengeDevice:
    found = session.exec(
        select(MarketChallengeDevice)
        .where(MarketChallengeDevice.challenge_id == row.id, MarketChallengeDevice.device == device)
        .with_for_update()
    ).first()
    if found is None:
        raise _refuse(
            "invalid_field", f"device {device}: challenge {row.id} has devices 0..{row.devices - 1}"
        )
    return found


def commit(  # noqa: PLR0917 - a step's inputs
    session: Session,
    domain: Eip712Domain,
    challenge_id: int,
    device: int,
    root: bytes,
    signature: str,
    now: datetime,
) -> bytes:
    """Record ``device``'s root if it came by the deadline; its probe key."""
    row = _load(session, challenge_id)
    dev = _device(session, row, device)
    challenge_auth.check(domain, row.node, "commit", challenge_id, device, root, signature)
    if dev.verdict != "open":
        raise _refuse("challenge_closed", f"device {device} already committed ({dev.verdict})")
    if now > row.deadline_at:
        late = (now - row.issued_at).total_seconds()
        _fail(dev, f"late: committed {late:.3f} s after issue, deadline {_span(row):.3f} s")
        _decide(session, row, now)
        session.commit()
        raise _refuse("challenge_late", f"challenge {challenge_id} device {device}: {dev.reason}")
    if row.verdict != "open":
        raise _refuse("challenge_closed", f"challenge {challenge_id} is {row.verdict}")
    dev.root, dev.committed_at, dev.verdict = "0x" + root.hex(), now, "committed"
    session.add(dev)
    session.commit()
    return ch.probe_key(bytes.fromhex(row.secret[2:]), device, root)


def open_(  # noqa: PLR0917 - a step's inputs
    session: Session,
    domain: Eip712Domain,
    challenge_id: int,
    device: int,
    opening: ch.Opening,
    signature: str,
    now: datetime,
) -> MarketChallenge:
    """Check ``device``'s opening; the challenge (its verdict once every device is decided)."""
    row = _load(session, challenge_id)
    dev = _device(session, row, device)
    challenge_auth.check(
        domain, row.node, "open", challenge_id, device, opening.digest(), signature
    )
    if dev.verdict != "committed" or dev.root is None:
        raise _refuse(
            "challenge_closed", f"device {device} is {dev.verdict}: only a commitment opens"
        )
    if now > row.deadline_at + timedelta(seconds=OPEN_WINDOW_S):
        _fail(dev, f"opened more than {OPEN_WINDOW_S:.0f} s after the deadline")
    else:
        root = bytes.fromhex(dev.root[2:])
        key = ch.probe_key(bytes.fromhex(row.secret[2:]), device, root)
        try:
            ch.verify(
                bytes.fromhex(row.seed[2:]),
                bytes.fromhex(dev.nonce[2:]),
                ch.Shape(row.n, row.m),
                root,
                key,
                opening,
            )
            dev.verdict = "passed"
        except ch.ChallengeError as exc:
            _fail(dev, f"wrong product: {exc}")
    session.add(dev)
    _decide(session, row, now)
    session.commit()
    return row


def expire(session: Session, row: MarketChallenge, now: datetime) -> None:
    """Fail the devices whose time ran out (no commitment by the deadline, or no opening in the
    window after it) and decide the challenge if that settles it. The caller commits."""
    if row.verdict != "open":
        return
    for dev in _devices(session, row.id or 0):
        if dev.verdict == "open" and now > row.deadline_at:
            _fail(dev, f"no commitment by the deadline ({_span(row):.3f} s after issue)")
        elif dev.verdict == "committed" and now > row.deadline_at + timedelta(
            seconds=OPEN_WINDOW_S
        ):
            _fail(dev, f"no opening within {OPEN_WINDOW_S:.0f} s of the deadline")
        session.add(dev)
    _decide(session, row, now)


def _span(row: MarketChallenge) -> float:
    return (row.deadline_at - row.issued_at).total_seconds()


def _fail(dev: MarketChallengeDevice, reason: str) -> None:
    dev.verdict, dev.reason = "failed", reason


def _decide(session: Session, row: MarketChallenge, now: datetime) -> None:
    session.flush()
    devices = _devices(session, row.id or 0)
    failed = [d for d in devices if d.verdict == "failed"]
    if failed:
        row.verdict, row.decided_at = "failed", now
        row.reason = "; ".join(f"device {d.device}: {d.reason}" for d in failed)
        if _misclaim(session, row, failed):
            _record_fraud(session, row, devices)
    elif all(d.verdict == "passed" for d in devices):
        shape = ch.Shape(row.n, row.m)
        row.verdict, row.decided_at = "passed", now
        row.measured_flops = int(
            sum(
                shape.flops / max((d.committed_at - row.issued_at).total_seconds(), 1e-6)
                for d in devices
                if d.committed_at is not None
            )
        )
        row.measured_memory_bytes = row.memory_bytes
        row.measured_devices = row.devices
    session.add(row)


TIMING_FAILURES: Final = ("late:", "no commitment by the deadline")


def _misclaim(session: Session, row: MarketChallenge, failed: list[MarketChallengeDevice]) -> bool:
    """Whether this failed challenge makes the node's claim a misclaim (a fraud record): a wrong
    answer always; being late only when a majority of the node's last
    ``ch.VERDICT_TRIALS`` decided challenges (this one included) failed, and once it has had
    that many (one late run on a loaded machine is noise; the node asks again)."""
    if any(not (d.reason or "").startswith(TIMING_FAILURES) for d in failed):
        return True
    session.flush()
    last = session.exec(
        select(MarketChallenge.verdict)
        .where(
            MarketChallenge.node == row.node,
            col(MarketChallenge.verdict).in_(("passed", "failed")),
        )
        .order_by(col(MarketChallenge.id).desc())
        .limit(ch.VERDICT_TRIALS)
    ).all()
    if len(last) < ch.VERDICT_TRIALS:
        row.reason = (row.reason or "") + (
            f" (late {sum(v == 'failed' for v in last)} of {len(last)} decided challenges: a "
            f"misclaim when a majority of {ch.VERDICT_TRIALS} is; ask again)"
        )
        return False
    refused = ch.majority_refused([v == "failed" for v in last])
    if not refused:
        note = f" (late in a minority of the last {ch.VERDICT_TRIALS}: not a misclaim)"
        row.reason = (row.reason or "") + note
    return refused


def evidence(row: MarketChallenge, devices: list[MarketChallengeDevice]) -> dict[str, Any]:
    """What anyone needs to check a verdict: the claim, the challenge (secret included once
    decided) and every device's outcome."""
    return {
        "kind": "market_challenge",
        "challenge": row.id,
        "node": row.node,
        "request": row.request,
        "result": row.request if row.verdict == "passed" else None,  # what an offer names
        "claim": {
            "kind": row.kind,
            "devices": row.devices,
            "memory_bytes": row.memory_bytes,
            "flops": row.flops,
        },
        "shape": [row.n, row.m],
        "seed": row.seed,
        "secret": row.secret if row.verdict != "open" else None,
        "slack": row.slack,
        "issued_at": row.issued_at.isoformat(),
        "deadline_at": row.deadline_at.isoformat(),
        "verdict": row.verdict,
        "reason": row.reason,
        "measured": {
            "flops": row.measured_flops,
            "memory_bytes": row.measured_memory_bytes,
            "devices": row.measured_devices,
        },
        "device_outcomes": [
            {
                "device": d.device,
                "nonce": d.nonce,
                "root": d.root,
                "committed_at": d.committed_at.isoformat() if d.committed_at else None,
                "verdict": d.verdict,
                "reason": d.reason,
            }
            for d in devices
        ],
    }


def _record_fraud(
    session: Session, row: MarketChallenge, devices: list[MarketChallengeDevice]
) -> None:
    exists = session.exec(
        select(FraudRecord).where(FraudRecord.run_id == MARKET_RUN_ID, FraudRecord.round == row.id)
    ).first()
    if exists is not None:
        return
    text = json.dumps(evidence(row, devices), sort_keys=True, separators=(",", ":"))
    session.add(
        FraudRecord(
            run_id=MARKET_RUN_ID,
            round=row.id or 0,
            node=row.node,
            digest=row.request,
            evidence_hash="0x" + keccak256(text.encode()).hex(),
            evidence=text,
        )
    )


def status(session: Session, challenge_id: int, now: datetime) -> dict[str, Any]:
    """The challenge as the API serves it (expired first if its time ran out)."""
    row = _load(session, challenge_id)
    expire(session, row, now)
    session.commit()
    return evidence(row, _devices(session, challenge_id))


def matches_offer(
    conn: Connection,
    *,
    node: str,
    challenge: bytes,
    device_count: int,
    memory_bytes: int,
    flops: int,
) -> bool:
    """Whether an offer's ``challenge`` (bytes32: the challenge's ``request``, its result id) is
    a passed challenge of ``node`` that measured at least what the offer carries: the device
    count exactly, at least ``memory_bytes`` per device and ``flops`` per device. The check the
    offers' ranking asks for (ledger/market/offers.py's ``ChallengeCheck``)."""
    table = MarketChallenge.__table__  # type: ignore[attr-defined]
    row = conn.execute(
        sa_select(
            table.c.node,
            table.c.verdict,
            table.c.measured_flops,
            table.c.measured_memory_bytes,
            table.c.measured_devices,
        ).where(table.c.request == "0x" + challenge.hex())
    ).first()
    if row is None or row.verdict != "passed" or row.node.lower() != node.lower():
        return False
    devices = int(row.measured_devices or 0)
    return (
        devices == device_count
        and int(row.measured_memory_bytes or 0) >= memory_bytes
        and int(row.measured_flops or 0) >= flops * devices
    )
