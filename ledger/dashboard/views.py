"""What each dashboard page shows, as plain dicts (rendered to HTML, or sent as JSON).

Reads the ledger's database, its blob store (checkpoints, for the loss curve and the sample) and
the chain (stakes, proposals). Integers beyond 2^53 are decimal strings (`wallet_safe`).
"""

from __future__ import annotations

import json
import logging
import threading
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlmodel import Session, col, func, select

from ledger.api.routes.nodes import missed_rounds
from ledger.chain.client import LedgerChain
from ledger.core.blobstore import BlobStore
from ledger.core.models import Attestation, RoundState, Run
from protocol.eip712 import to_checksum_address, wallet_safe
from protocol.errors import ContractRevertError
from protocol.reverts import show_args
from reference.governed import describe_actions

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

ROUNDS_SHOWN = 20
LOG_CHUNK = 2_000
STATES = ("Pending", "Active", "Canceled", "Defeated", "Succeeded", "Queued", "Expired", "Executed")
SAMPLE_PROMPT = "def "
FINAL = {"Canceled", "Defeated", "Expired", "Executed"}  # nothing more can happen to these


def _round_row(rnd: RoundState, members: list[str]) -> dict[str, Any]:
    return {
        "round": rnd.round,
        "state": rnd.state,
        "members": members,
        "checkpoint": rnd.checkpoint,
        "tx_hash": rnd.tx_hash,
        "note": rnd.note,
        "closed_at": rnd.closed_at.isoformat() if rnd.closed_at else None,
    }


def runs(engine: Engine, limit: int = ROUNDS_SHOWN) -> list[dict[str, Any]]:
    """Every run with its latest rounds (newest first) and the last committed round."""
    out = []
    with Session(engine) as session:
        for run in session.exec(select(Run).order_by(col(Run.created_at))).all():
            rounds = session.exec(
                select(RoundState)
                .where(RoundState.run_id == run.run_id)
                .order_by(col(RoundState.round).desc())
                .limit(limit)
            ).all()
            rows = []
            for rnd in rounds:
                members = session.exec(
                    select(Attestation.node).where(
                        Attestation.run_id == run.run_id, Attestation.round == rnd.round
                    )
                ).all()
                rows.append(_round_row(rnd, sorted(members)))
            committed = [r["round"] for r in rows if r["state"] in ("committed", "final")]
            out.append(
                {
                    "run_id": run.run_id,
                    "name": run.name,
                    "genesis_checkpoint": run.genesis_checkpoint,
                    "created_at": run.created_at.isoformat(),
                    "last_committed": max(committed) if committed else None,
                    "rounds": rows,
                }
            )
    return out


class ModelCache:
    """Held-out loss and a sample per checkpoint, computed once from the ledger's blob store
    (checkpoints of the model ``preset``, blobs of at most ``max_bytes``)."""

    def __init__(self, preset: str, blobs: BlobStore, *, max_bytes: int) -> None:
        self.preset = preset
        self.blobs = blobs
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._loss: dict[str, float | None] = {}
        self._sample: dict[str, str | None] = {}

    def _model(self, checkpoint: str) -> Any:
        from protocol.blobs import decode_blob
        from reference.model import GPT, GPTConfig

        data = self.blobs.get_bytes(checkpoint)
        if data is None:
            return None
        model = GPT(GPTConfig.preset(self.preset))
        model.load_state_dict(decode_blob(data, max_bytes=self.max_bytes))
        model.eval()
        return model

    def loss(self, checkpoint: str) -> float | None:
        with self._lock:
            if checkpoint not in self._loss:
                self._loss[checkpoint] = self._compute_loss(checkpoint)
            return self._loss[checkpoint]

    def _compute_loss(self, checkpoint: str) -> float | None:
        from reference.data import Corpus
        from reference.model import evaluate

        try:
            model = self._model(checkpoint)
            if model is None:
                return None
            rows = Corpus.load(None).eval_rows(model.cfg.seq_len)  # the one eval loss's rows
            return round(float(evaluate(model, rows)), 5)
        except Exception as exc:  # a checkpoint of another shape: no point on the curve
            log.info("no held-out loss for %s: %s", checkpoint, exc)
            return None

    def sample(self, checkpoint: str) -> str | None:
        with self._lock:
            if checkpoint not in self._sample:
                self._sample[checkpoint] = self._compute_sample(checkpoint)
            return self._sample[checkpoint]

    def _compute_sample(self, checkpoint: str) -> str | None:
        import torch

        try:
            model = self._model(checkpoint)
        except Exception as exc:
            log.info("no sample from %s: %s", checkpoint, exc)
            return None
        if model is None:
            return None
        idx = torch.tensor([list(SAMPLE_PROMPT.encode())], dtype=torch.long)
        with torch.no_grad():
            for _ in range(48):
                logits, _ = model(idx[:, -model.cfg.seq_len :])
                idx = torch.cat([idx, logits[:, -1:].argmax(dim=-1)], dim=1)
        return bytes(idx[0].tolist()).decode("utf-8", errors="replace")


_NO_WORK: dict[str, Any] = {"paid": 0, "config_versions": [], "inner_steps": []}


def _round_work(rows: Any) -> dict[int, dict[str, Any]]:
    """round -> CMS paid to its nodes, the config versions and inner steps they trained under."""
    paid: dict[int, int] = {}
    versions: dict[int, set[int]] = {}
    steps: dict[int, set[int]] = {}
    for rnd, version, inner, reward in rows:
        paid[int(rnd)] = paid.get(int(rnd), 0) + int(reward or 0)
        versions.setdefault(int(rnd), set()).add(int(version))
        steps.setdefault(int(rnd), set()).add(int(inner))
    return {
        r: {
            "paid": paid[r],
            "config_versions": sorted(versions[r]),
            "inner_steps": sorted(steps[r]),
        }
        for r in paid
    }


def run_detail(engine: Engine, run_id: str, cache: ModelCache) -> dict[str, Any] | None:
    """One run: its rounds, the loss curve of its committed checkpoints, a sample of the last."""
    run_id = run_id.lower()
    with Session(engine) as session:
        run = session.get(Run, run_id)
        if run is None:
            return None
        rounds = session.exec(
            select(RoundState).where(RoundState.run_id == run_id).order_by(col(RoundState.round))
        ).all()
        nodes = session.exec(
            select(Attestation.node, func.count(), func.sum(Attestation.tokens))
            .where(Attestation.run_id == run_id)
            .group_by(Attestation.node)
        ).all()
        work = session.exec(
            select(
                Attestation.round,
                Attestation.config_version,
                Attestation.inner_steps,
                Attestation.reward,
            ).where(Attestation.run_id == run_id)
        ).all()
    curve = []
    for rnd in rounds:
        if rnd.checkpoint and rnd.state in ("committed", "final"):
            loss = cache.loss(rnd.checkpoint)
            if loss is not None:
                curve.append({"round": rnd.round, "eval_loss": loss})
    committed = [r for r in rounds if r.checkpoint and r.state in ("committed", "final")]
    latest = committed[-1].checkpoint if committed else None
    per_round = _round_work(work)
    return {
        "run_id": run_id,
        "name": run.name,
        "genesis_checkpoint": run.genesis_checkpoint,
        "rounds": [
            {**_round_row(r, []), **per_round.get(r.round, _NO_WORK)} for r in reversed(rounds)
        ],
        "loss_curve": curve,
        "nodes": [
            {"node": node, "rounds": int(count), "tokens": int(tokens or 0)}
            for node, count, tokens in nodes
        ],
        "sample": {
            "checkpoint": latest,
            "prompt": SAMPLE_PROMPT,
            "text": cache.sample(latest) if latest else None,
        },
    }


def nodes(engine: Engine, chain: LedgerChain) -> list[dict[str, Any]]:
    """Every node that attested: stake (chain), rounds worked and rewards (ledger)."""
    from protocol.types import Address

    with Session(engine) as session:
        rows = session.exec(
            select(Attestation.node, Attestation.payout, Attestation.round, Attestation.reward)
        ).all()
    by_node: dict[str, dict[str, Any]] = {}
    for node, payout, rnd, reward in rows:
        entry = by_node.setdefault(
            node, {"node": node, "payout": payout, "rounds": set(), "rewarded": 0}
        )
        entry["rounds"].add(rnd)
        entry["rewarded"] += int(reward or 0)
    out = []
    for node, entry in sorted(by_node.items()):
        try:
            info = chain.client.node_info(Address(node))
            stake: int | None = int(info.staked)
            active: bool | None = bool(chain.client.is_active(Address(node)))
        except Exception as exc:  # the chain may be away: show what the ledger knows
            log.info("no stake for %s: %s", node, exc)
            stake, active = None, None
        out.append(
            {
                "node": node,
                "payout": entry["payout"],
                "stake": stake,
                "active": active,
                "rounds_worked": len(entry["rounds"]),
                "rewarded": entry["rewarded"],
            }
        )
    return out


def node_detail(engine: Engine, chain: LedgerChain, address: str) -> dict[str, Any]:
    """One node's receipts: per round, claimed vs verified tokens, quality, reward and why."""
    with Session(engine) as session:
        atts = session.exec(
            select(Attestation)
            .where(func.lower(Attestation.node) == address.lower())
            .order_by(col(Attestation.run_id), col(Attestation.round))
        ).all()
        names = dict(session.exec(select(Run.run_id, Run.name)).all())
    receipts = [
        {
            "run_id": a.run_id,
            "run_name": names.get(a.run_id),
            "round": a.round,
            "claimed_tokens": a.tokens,
            "verified_tokens": a.verified_tokens,
            "quality": a.quality,
            "reward": int(a.reward) if a.reward else 0,
            "reason": a.reason,
            "payout": a.payout,
        }
        for a in atts
    ]
    with engine.connect() as conn:
        missed = missed_rounds(conn, [to_checksum_address(address)])
    for m in missed:
        m["run_name"] = names.get(str(m["run_id"]))
    stake = next((n for n in nodes(engine, chain) if n["node"].lower() == address.lower()), None)
    return {"node": address, "summary": stake, "receipts": receipts, "missed": missed}


def proposals(chain: LedgerChain) -> dict[str, Any]:
    """Governor proposals (ProposalCreated logs, read in chunks): state, votes, what each does
    (reference.governed, as `coloco gov status` shows it) and whether anything more can happen
    to it (a Queued proposal whose actions the Timelock could not execute now says why)."""
    client = chain.client
    try:
        head = client.block_number()
        now = int(client.w3.eth.get_block("latest")["timestamp"])
        event = client.contract("ModelGovernor").events.ProposalCreated
        logs: list[Any] = []
        start = chain.deployment_block
        while start <= head:
            end = min(start + LOG_CHUNK - 1, head)
            fetch = partial(event.get_logs, from_block=start, to_block=end)
            logs.extend(client.rpc(fetch, "eth_getLogs ProposalCreated"))
            start = end + 1
        out = []
        for ev in logs:
            pid = int(ev.args.proposalId)
            votes = client.model_governor.proposal_votes(pid)
            state = STATES[client.model_governor.state(pid)]
            targets = [str(t) for t in ev.args.targets]
            calldatas = [bytes(c) for c in ev.args.calldatas]
            values = [int(v) for v in ev.args.values]
            out.append(
                {
                    "proposal_id": str(pid),
                    "description": str(ev.args.description),
                    "state": state,
                    "final": state in FINAL,
                    "blocked": _blocked(client, targets, calldatas, values)
                    if state == "Queued"
                    else None,
                    "actions": describe_actions(client, targets, calldatas, values),
                    "for": int(votes.for_votes),
                    "against": int(votes.against_votes),
                    "abstain": int(votes.abstain_votes),
                    "vote_start": int(ev.args.voteStart),
                    "vote_end": int(ev.args.voteEnd),
                }
            )
        return {"now": now, "proposals": out}
    except Exception as exc:  # no chain: the page says so instead of failing
        log.info("proposals unavailable: %s", exc)
        return {"now": None, "proposals": []}


def _blocked(
    client: ChainClient, targets: list[str], calldatas: list[bytes], values: list[int]
) -> str | None:
    """Why the Timelock's execute would revert now (each action run as an eth_call from the
    Timelock), or None when every action would go through."""
    timelock = str(client.deployment.contracts["TimelockController"])
    for target, data, value in zip(targets, calldatas, values, strict=True):
        tx = {"from": timelock, "to": target, "data": "0x" + data.hex(), "value": value}
        try:
            client.rpc(partial(client.w3.eth.call, tx), "eth_call proposal action")  # type: ignore[arg-type]
        except ContractRevertError as exc:
            args = ", ".join(show_args(exc.error_arg_names, exc.error_args))
            return f"{exc.error_name or exc}({args})" if exc.error_name else str(exc)
    return None


def how_to(chain: LedgerChain) -> dict[str, Any]:
    """How to claim and vote: the contracts, the commands, the typed data a wallet signs."""
    from protocol.attestation import ATTESTATION_SPEC

    dep = chain.deployment
    typed = ATTESTATION_SPEC.signing_schema(chain.domain)
    return {
        "chain_id": int(dep.chain_id),
        "contracts": {name: str(addr) for name, addr in sorted(dep.contracts.items())},
        "claim": [
            "coloco rewards show 0xPAYOUT",
            "coloco rewards claim 0xPAYOUT --account NAME",
        ],
        "vote": [
            "coloco gov list",
            "coloco gov vote PROPOSAL_ID --support for --account NAME",
        ],
        "typed_data": typed,
        "typed_data_json": json.dumps(wallet_safe(typed), indent=2),
    }
