"""`coloco audit`: an independent auditor of a ledger's rounds (level 3).

Reads the rounds of a run from a ledger (``GET /v1/runs/{run}/rounds``) and samples the paid
(node, round) pairs with its own draw (a fresh random seed each call, so no node can predict it;
``--fraction 1`` takes every one). Each sampled pair is checked with what public data allows,
with the ledger's own code (docs/ledger.md, "The independent auditor"):

- the ledger segment-audited it (``GET /v1/runs/{run}/rounds/{round}/segment-audits``): the
  delivered start states and end sketches are downloaded (``/v1/blobs/{hash}``, each must hash
  to its name) and the drawn segments re-run with ``ledger.judge.segments.check_entry`` (and,
  for a round that did not start from its attested base, ``ledger.judge.origin_check``) against
  the segment tolerance: ``pass`` or ``fail`` with the evidence;
- its round starts from public inputs (the fresh inner mode, ``reference.inner.CARRY_STATE``
  off, and its attested base is the previous round's checkpoint, or it commits no trace): the
  round is replayed whole from its base on the declared shard (``ledger.judge.replay.audit``,
  with the mode's AdamW constants);
- neither (the round starts from the node's carried state, not public): ``unverifiable``, with
  the reason, never a failure.

Prints one line per pair, then a summary; with ``--json`` one JSON object ``{"audited",
"failed", "unavailable", "unverifiable", "verdicts": [...]}`` instead. Exit code 1 only when a
check fails: its verdict carries the evidence (attestation digest, replay inputs, hashes).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated, Any

import httpx
import typer

from coloco_cli.common import (
    DeploymentOpt,
    JsonOpt,
    LedgerUrlOpt,
    RpcUrlOpt,
    emit_json,
    resolve,
)
from coloco_cli.config_history import ConfigHistory
from coloco_cli.run.ops import parse_run_id
from coloco_cli.tx import open_chain
from ledger.core.config import AUDIT_TOLERANCE, SEGMENT_TOLERANCE
from protocol.attestation import ATTESTATION_ATTRS
from protocol.errors import ConfigError, LedgerError, LedgerUnavailableError
from reference.settings import TrainingSettings, WireFormat

if TYPE_CHECKING:
    from ledger.judge.origin_check import OriginVerdict

UNVERIFIABLE = (
    "the round starts from the node's carried state, which is not public; only the ledger's "
    "draw can ask a node for its boundaries"
)
SPARSE_UNVERIFIABLE = (
    "a sparse packet is recomputed from the node's committed boundary 0 (its residual) and last "
    "boundary, which only the ledger's draw can ask for: the ledger did not segment-audit it"
)
NOT_SEGMENT_AUDITED = (
    "the ledger did not segment-audit this node-round: it asked only for the boundaries the "
    "next round's audit reads (its last AdamW state)"
)
NO_TRACE = "0x" + "00" * 32  # an attestation's traceRoot when it commits no trace


def audit_rounds(
    http: httpx.Client,
    run_id: str,
    *,
    fraction: float,
    model: str,
    tolerance: float,
    inner_lr: float | None = None,
    mixture: tuple[int, ...] | None = None,
    segment_tolerance: float = SEGMENT_TOLERANCE,
    corpus_dir: Path | None = None,
    limit: int = 50,
    inner_steps: int | None = None,
    data_root: bytes | None = None,
    carried: bool | None = None,
    config_of: Callable[[int], TrainingSettings | None] | None = None,
) -> list[dict[str, Any]]:
    """Check the sampled pairs of the run's latest ``limit`` scored rounds; one verdict each.

    A pair the ledger segment-audited (``GET .../segment-audits``) is re-checked from the
    delivered states with the ledger's own function (``ledger.judge.segments.check_entry``,
    within ``segment_tolerance``); a pair whose round starts from public inputs (the fresh inner
    mode, ``carried`` False, and a base that is the previous round's checkpoint) is replayed
    whole from its base (``ledger.judge.replay.audit``, within ``tolerance``); any other pair is
    ``unverifiable`` (:data:`UNVERIFIABLE`), never failed. ``carried``: the protocol's inner
    mode (None: ``reference.inner.CARRY_STATE``).

    Each pair is replayed under the TrainingConfig version its attestation signs (``config_of``:
    that version's settings, :class:`coloco_cli.config_history.ConfigHistory`), as the ledger
    judged it: the inner lr, the mixture and the governed H (which lets a time-boxed node's
    planned shard be found, ``ledger.judge.usefulness.matching_shard``). ``inner_lr``,
    ``mixture`` and ``inner_steps`` override the version's for every pair; a pair whose version
    cannot be read, with no override, is ``unverifiable``. ``data_root`` (the run's
    ``TrainingConfig.dataRoot``): the corpus is refused (DataMismatch) before any replay when
    it is not the run's data."""
    from ledger.judge.audits import sampled
    from ledger.judge.pseudo_gradients import decode_pseudo_gradient
    from ledger.judge.replay import ReplayInputs, audit
    from ledger.judge.usefulness import corpus_of, matching_shard
    from reference import inner

    mode = inner.CARRY_STATE if carried is None else carried
    resp = http.get(f"/v1/runs/{run_id}/rounds", params={"limit": limit})
    if resp.status_code != 200:
        raise LedgerError(
            f"ledger answered {resp.status_code} for the rounds of run {run_id}: {resp.text[:300]}"
        )
    rounds = resp.json()
    checkpoints = {r["round"]: r["checkpoint"] for r in rounds}
    corpus = corpus_of(corpus_dir, data_root)
    seed = os.urandom(32)  # the auditor's own draw: no node can predict which pairs it checks
    out: list[dict[str, Any]] = []
    for rnd in sorted(rounds, key=lambda x: x["round"]):
        if rnd["state"] not in ("scored", "committed", "final"):
            continue
        audited: dict[str, dict[str, Any]] | None = None  # the ledger's, read once a round
        for s in rnd["scores"]:
            if not s["verified"] or not sampled(seed, s["node"], fraction):
                continue
            key = {"round": rnd["round"], "node": s["node"], "digest": s["digest"]}
            traced = s.get("trace_root") not in (None, "", NO_TRACE)
            if traced and audited is None:
                audited = _segment_audits(http, run_id, rnd["round"])
            entry = (audited or {}).get(s["node"].lower()) if traced else None
            prev = checkpoints.get(rnd["round"] - 1) or _checkpoint(http, run_id, rnd["round"] - 1)
            public = not mode and (not traced or s["base_checkpoint"] == prev)
            if (entry is None or not entry["segments"]) and not public:
                out.append({**key, "verdict": "unverifiable", "reason": UNVERIFIABLE})
                continue
            base = _tensors(http, s["base_checkpoint"])
            raw = _tensors(http, s["pseudo_gradient"])
            if base is None or raw is None:
                out.append({**key, "verdict": "unavailable",
                            "reason": "the base or the pseudo-gradient is not served"})  # fmt: skip
                continue
            signed = config_of(s["config_version"]) if config_of is not None else None
            if signed is None and (inner_lr is None or mixture is None):
                out.append({**key, "verdict": "unverifiable", "reason": (
                    f"TrainingConfig version {s['config_version']}, which the pair was trained "
                    "under, is not readable from this RPC (a pruned node: use an archive node, "
                    "or pass --inner-lr and --mixture)")})  # fmt: skip
                continue
            lr = inner_lr if inner_lr is not None else signed.inner_lr  # type: ignore[union-attr]
            bps = mixture if mixture is not None else tuple(signed.data_mixture_bps)  # type: ignore[union-attr]
            h = inner_steps if inner_steps is not None or signed is None else signed.inner_steps
            tensors, packet, bad = decode_pseudo_gradient(raw, base)
            att = SimpleNamespace(**{k: s[k] for k in ATTESTATION_ATTRS})  # a round's score row
            inputs = ReplayInputs(
                run_id=bytes.fromhex(run_id[2:]),
                round=rnd["round"],
                node=s["node"],
                tokens=s["tokens"],
                inner_steps=s["inner_steps"],
                inner_lr=lr,
                mixture=bps,
                preset=model,
                data_root=data_root,
                shard_tokens=matching_shard(att, bps, h) or 0,  # type: ignore[arg-type]
            )
            if bad is not None:
                out.append({**key, "verdict": "fail", "reason": bad})
                continue
            if packet is not None and packet.fmt is WireFormat.SPARSE and entry is None:
                out.append({**key, "verdict": "unverifiable", "reason": SPARSE_UNVERIFIABLE})
                continue
            if entry is not None and entry["segments"]:
                out.append(key | recheck_segments(http, run_id, entry, base, tensors, packet,
                                                  inputs, corpus, segment_tolerance))  # fmt: skip
                continue
            v = audit(base, tensors, inputs, corpus, tolerance=tolerance, packet=packet,
                      carried=mode)  # fmt: skip
            out.append(
                key | {
                    "check": "round",
                    "verdict": "pass" if v.passed else "fail",
                    "relative_error": v.rel_error,
                    "submitted": s["pseudo_gradient"],
                    "replayed": v.replayed_hash,
                    "replay_inputs": inputs.to_json(),
                    "reason": v.reason,
                }
            )  # fmt: skip
    return out


def _segment_audits(http: httpx.Client, run_id: str, round_: int) -> dict[str, dict[str, Any]]:
    """The ledger's segment audits of a round, by node (lower-case address)."""
    resp = http.get(f"/v1/runs/{run_id}/rounds/{round_}/segment-audits",
                    params={"limit": 1000})  # fmt: skip
    if resp.status_code != 200:
        raise LedgerError(f"ledger answered {resp.status_code} for the segment audits of round "
                          f"{round_} of run {run_id}: {resp.text[:300]}")  # fmt: skip
    return {a["node"].lower(): a for a in resp.json()}


def _checkpoint(http: httpx.Client, run_id: str, round_: int) -> str | None:
    if round_ < 0:
        return None
    resp = http.get(f"/v1/runs/{run_id}/rounds/{round_}")
    return resp.json().get("checkpoint") if resp.status_code == 200 else None


def recheck_segments(  # noqa: PLR0917 - the node-round's public inputs
    http: httpx.Client,
    run_id: str,
    entry: dict[str, Any],
    base: Any,
    submitted: Any,
    packet: Any,
    inputs: Any,
    corpus: Any,
    tolerance: float,
) -> dict[str, Any]:
    """Re-run the ledger's segment audit of one node-round (``entry``: its
    ``GET .../segment-audits`` object) from the delivered blobs, each checked to hash to its
    name, with the ledger's own functions: ``ledger.judge.segments.check_entry`` (each full
    state against its committed sketch, the last boundary against the pseudo-gradient, each
    drawn segment replayed), after ``starts_elsewhere`` and ``ledger.judge.origin_check`` for a
    round that did not start from its attested base (its round r-1 boundaries read the same
    way). A verdict ``pass``/``fail`` with the evidence, or ``unavailable``."""
    from dataclasses import replace

    from ledger.core.models import SKETCH_REQUEST, STATE_REQUEST
    from ledger.judge import segments
    from ledger.judge.origin_check import PreviousRound, audit_bases, check_origin

    sparse = packet is not None and packet.fmt is WireFormat.SPARSE  # its plan moves 0, last
    plan = segments.SegmentPlan(tuple(entry["segments"]), tuple(entry["boundary_steps"]),
                                public_start=entry["public_start"], exact=sparse)  # fmt: skip
    common = {
        "check": "segments",
        "segments": entry["segments"],
        "ledger_verdict": entry["ledger_verdict"],
        "ledger_error": entry["ledger_error"],
    }
    asked = {(b["boundary"], STATE_REQUEST if b["full"] else SKETCH_REQUEST)
             for b in entry["boundaries"]}  # fmt: skip
    if not set(plan.needed) <= asked:  # asked only what round r+1's audit reads of it
        return common | {"verdict": "unverifiable", "reason": NOT_SEGMENT_AUDITED}
    waiting = [b["boundary"] for b in entry["boundaries"] if b["state"] != "delivered"]
    if waiting:  # pending, or withheld (the ledger fails the node for that itself)
        why = f"boundaries {waiting} the ledger asked for are not delivered"
        return common | {"verdict": "unavailable", "reason": why}
    delivered = _delivered(http, entry)
    if isinstance(delivered, str):
        return common | {"verdict": "unavailable", "reason": delivered}
    requests, states = delivered
    for need in plan.needed:
        if need not in requests:
            return common | {"verdict": "unavailable", "reason": f"boundary {need[0]} "
                             "the ledger's plan needs was not delivered"}  # fmt: skip
    start_base, moved_to = base, None
    origin = None
    # a round whose deliveries say it did not start from its base is audited from its origin,
    # boundary 0 in full, as the ledger does once it asked for it; without it (the ledger did
    # not move the audit to the origin) the round is checked as lockstep, where a state that is
    # not the node's fails check_entry
    if segments.starts_elsewhere(plan, requests, states, base) and (0, STATE_REQUEST) in requests:
        plan = replace(plan, origin=True)
        from_origin = states[(0, STATE_REQUEST)]
        origin = check_origin(from_origin, base)
        prev = None
        if not origin.passed:  # not its base: the overlap schedule's start, from round r-1
            prev = _previous(http, run_id, inputs.round - 1, inputs.node)
            if isinstance(prev, str):
                return common | {"verdict": "unavailable", "reason": prev}
        if prev is not None:
            origin = check_origin(from_origin, base, PreviousRound(*prev))
        if origin.passed:
            start_base, moved_to = audit_bases(origin, from_origin, base)
        elif prev is not None:
            return common | {"verdict": "fail", "reason": origin.reason}
        else:  # the ledger audited it from its attested base: so does check_entry, below
            plan, origin = replace(plan, origin=False), None
    used = {n: requests[n] for n in plan.needed}
    outcome = segments.check_entry(
        submitted, packet, start_base, inputs, corpus, plan, used,
        {n: states[n] for n in plan.needed}, tolerance=tolerance,
        excused={int(b): why for b, why in entry["excused"].items()}, moved_to=moved_to,
    )  # fmt: skip
    reason = outcome.reason + (f"; origin: {origin.reason}" if origin else "")
    if outcome.passed and sparse:
        exact, why = _sparse_exact(http, run_id, entry, packet, states, base, origin)
        if exact != "pass":
            return common | {"verdict": exact, "reason": why, "evidence": outcome.evidence}
        reason += f"; {why}"
    if outcome.passed and not plan.public_start:  # the carried AdamW's start, as the ledger
        kept, why = _continuity(http, run_id, entry, requests, states)
        if kept != "pass":
            return common | {"verdict": kept, "reason": why, "evidence": outcome.evidence}
        reason += f"; {why}"
    return common | {
        "verdict": "pass" if outcome.passed else "fail",
        "relative_error": outcome.evidence.get("segment_error"),
        "reason": reason,
        "evidence": outcome.evidence,
        "replay_inputs": inputs.to_json(),
    }


def _sparse_exact(  # noqa: PLR0917 - the node-round's public inputs
    http: httpx.Client,
    run_id: str,
    entry: dict[str, Any],
    packet: Any,
    states: dict[Any, Any],
    base: Any,
    from_origin: OriginVerdict | None,
) -> tuple[str, str]:
    """(verdict, reason) of ``ledger.judge.sparse_check``'s rules from public data: the signed
    packet recomputed bit for bit from the delivered boundary 0 (weights and residual) and last
    boundary, both in full (the ledger's plan of a sparse round moves them), boundary 0 being
    the round's base (or its verified origin, ``from_origin``: the origin check's verdict, the
    packet measured from the base for the bounded overlap, None: not checked); and a residual that
    is not zero equal to what the node's round r-1 left, recomputed from round r-1's delivered
    boundaries 0 and last."""
    from ledger.core.models import STATE_REQUEST
    from ledger.judge.origin_check import PreviousRound, audit_bases, check_origin
    from ledger.judge.sparse_check import carried_residual, carries_residual, check_sparse_round

    last = len(entry["boundary_steps"]) - 1
    start, end = states.get((0, STATE_REQUEST)), states.get((last, STATE_REQUEST))
    if start is None or end is None:
        return "unverifiable", (f"the ledger did not move boundaries 0 and {last} of this sparse "
                                "round in full: its packet cannot be recomputed")  # fmt: skip
    origin = check_origin(start, base) if from_origin is None else from_origin
    if not origin.passed:
        return "fail", origin.reason
    verdict = check_sparse_round(packet, start, end, origin=audit_bases(origin, start, base)[0])
    if not verdict.passed:
        return "fail", verdict.reason
    if not carries_residual(start):
        return "pass", f"{verdict.reason}; the round starts from a zero residual"
    prev = _previous(http, run_id, entry["round"] - 1, entry["node"])
    if prev is None:
        return "unverifiable", (f"{verdict.reason}; boundary 0 carries a residual, and the "
                                f"ledger did not move round {entry['round'] - 1}'s boundaries 0 "
                                "and last, which tell what it left")  # fmt: skip
    if isinstance(prev, str):
        return "unavailable", prev
    carried = carried_residual(start, PreviousRound(*prev))
    return ("pass" if carried.passed else "fail"), f"{verdict.reason}; {carried.reason}"


def _continuity(
    http: httpx.Client,
    run_id: str,
    entry: dict[str, Any],
    requests: dict[Any, Any],
    states: dict[Any, Any],
) -> tuple[str, str]:
    """(verdict, reason) of ``ledger.judge.continuity``'s rule from public data: boundary 0's
    AdamW hash (its delivered state or sketch) must be a fresh AdamW's or that of the last
    boundary's sketch of the node's round r-1, as the ledger served it."""
    from ledger.judge.continuity import start_adam
    from protocol.hashing import hash_state_dict
    from reference.sketch import FRESH_ADAM, SketchError, check_sketch, committed_adam

    try:
        start = start_adam(requests, states)
    except (KeyError, SketchError) as exc:
        return "unavailable", f"boundary 0's AdamW state cannot be read: {exc}"
    if start == FRESH_ADAM:
        return "pass", "boundary 0 starts a fresh AdamW"
    before = entry["round"] - 1
    prev = _segment_audits(http, run_id, before).get(entry["node"].lower())
    last = len(prev["boundary_steps"]) - 1 if prev and prev["boundary_steps"] else None
    row = next((b for b in (prev or {}).get("boundaries", []) if b["boundary"] == last
                and not b["full"] and b["state"] == "delivered"), None)  # fmt: skip
    if row is None:
        why = (f"round {before}'s last boundary sketch of this node is not served: boundary "
               "0's carried AdamW state cannot be matched")  # fmt: skip
        return "unavailable", why
    sketch = _tensors(http, row["sketch_hash"])
    if sketch is None or "0x" + hash_state_dict(sketch).hex() != row["sketch_hash"]:
        return "unavailable", f"round {before}'s last boundary sketch {row['sketch_hash']} is " \
                              "not served, or does not hash to its name"  # fmt: skip
    try:
        check_sketch(sketch)
    except SketchError as exc:
        return "unavailable", f"round {before}'s last boundary sketch: {exc}"
    if committed_adam(sketch) != start:
        return "fail", (f"boundary 0's AdamW state 0x{start.hex()} is neither fresh nor the one "
                        f"the node's round {before} ended with "
                        f"(0x{committed_adam(sketch).hex()}, its boundary {last})")  # fmt: skip
    return "pass", f"boundary 0 carries round {before}'s AdamW state"


def _delivered(
    http: httpx.Client, entry: dict[str, Any]
) -> tuple[dict[Any, Any], dict[Any, Any]] | str:
    """The entry's delivered boundaries as the ledger's rows and their blobs (each checked to
    hash to its name), or why they cannot be had."""
    from ledger.core.models import SKETCH_REQUEST, STATE_REQUEST, BoundaryRequest
    from protocol.hashing import hash_state_dict

    requests: dict[Any, Any] = {}
    states: dict[Any, Any] = {}
    for b in entry["boundaries"]:
        if b["state"] != "delivered":
            continue
        what = STATE_REQUEST if b["full"] else SKETCH_REQUEST
        name = b["state_hash"] if b["full"] else b["sketch_hash"]
        tensors = _tensors(http, name)
        if tensors is None:
            return f"boundary {b['boundary']}'s blob {name} is not served"
        if "0x" + hash_state_dict(tensors).hex() != name:
            return f"boundary {b['boundary']}'s blob does not hash to its name {name}"
        requests[(b["boundary"], what)] = BoundaryRequest(
            run_id=entry["run_id"], round=entry["round"], node=entry["node"],
            boundary=b["boundary"], at_step=what, trace_root=entry["trace_root"] or "",
            deadline=datetime.now(UTC), state="delivered", step=b["step"],
            state_hash=b["state_hash"], sketch_hash=b["sketch_hash"],
        )  # fmt: skip
        states[(b["boundary"], what)] = tensors
    return requests, states


def _previous(
    http: httpx.Client, run_id: str, round_: int, node: str
) -> tuple[Any, Any, Any, str | None] | str | None:
    """Round ``round_`` of ``node`` as the origin check reads it: its attested base, its
    delivered boundary 0 and last boundary in full and the last one's committed sketch hash;
    None when the ledger did not ask for them (it did not audit the round from an overlapped
    origin), a reason when they are not had."""
    from ledger.core.models import STATE_REQUEST

    resp = http.get(f"/v1/runs/{run_id}/rounds/{round_}")
    score = next((s for s in resp.json().get("scores", []) if s["node"].lower() == node.lower()),
                 None) if resp.status_code == 200 else None  # fmt: skip
    entry = _segment_audits(http, run_id, round_).get(node.lower()) if score else None
    if score is None or entry is None:
        return None
    full = {b["boundary"] for b in entry["boundaries"] if b["full"]}
    last = len(entry["boundary_steps"]) - 1 if entry["boundary_steps"] else max(full, default=0)
    if not {0, last} <= full:
        return None
    if any(b["state"] != "delivered" for b in entry["boundaries"] if b["full"]):
        return f"round {round_}'s boundaries 0 and {last}, asked for in full, are not delivered"
    delivered = _delivered(http, entry)
    if isinstance(delivered, str):
        return delivered
    requests, states = delivered
    base = _tensors(http, score["base_checkpoint"])
    if base is None:
        return f"round {round_}'s base checkpoint {score['base_checkpoint']} is not served"
    end = (last, STATE_REQUEST)
    return base, states[(0, STATE_REQUEST)], states[end], requests[end].sketch_hash


def _tensors(http: httpx.Client, hash_hex: str) -> Any:
    from protocol.blobs import decode_blob  # torch: imported when a replay runs, not at start

    resp = http.get(f"/v1/blobs/{hash_hex}")
    if resp.status_code != 200:
        return None
    return decode_blob(resp.content, max_bytes=1 << 34)


def audit_command(  # noqa: PLR0917 - typer options
    target: Annotated[
        str | None,
        typer.Argument(
            help="a fraud record's id or a verdict's evidence file: re-check its one-step "
            "verdict instead of replaying rounds"
        ),
    ] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="bytes32 run id (0x..)")] = None,
    ledger_url: LedgerUrlOpt = None,
    fraction: Annotated[float, typer.Option(help="share of paid pairs to replay (0..1)")] = 0.1,
    model: Annotated[str, typer.Option(help="the run's model preset")] = "tiny",
    inner_lr: Annotated[
        float | None,
        typer.Option(
            help="inner lr for every pair (default: that of the TrainingConfig "
            "version each pair signed, read on chain)"
        ),
    ] = None,
    mixture: Annotated[
        str | None,
        typer.Option(
            help="data mixture bps, comma-separated, for every pair (default: the signed version's)"
        ),
    ] = None,
    inner_steps: Annotated[
        int | None,
        typer.Option(
            min=1, help="governed inner steps H for every pair (default: the signed version's)"
        ),
    ] = None,
    tolerance: Annotated[
        float,
        typer.Option(help="a whole-round replay's relative L2 error allowed (the ledger's)"),
    ] = AUDIT_TOLERANCE,
    segment_tolerance: Annotated[
        float, typer.Option(help="a segment replay's error allowed (the ledger's default)")
    ] = SEGMENT_TOLERANCE,
    limit: Annotated[int, typer.Option(help="latest rounds to look at")] = 50,
    data: Annotated[
        Path | None,
        typer.Option(help="the run's data folder (default: the shipped default corpus)"),
    ] = None,
    json_out: JsonOpt = False,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    threads: Annotated[
        int,
        typer.Option(
            min=0,
            help="torch threads for a verdict's re-check (1: the fewest CPU seconds for one "
            "step; 0: torch's default, sooner on a large model)",
        ),
    ] = 1,
    full_step: Annotated[
        bool,
        typer.Option(
            "--full-step",
            help="re-check a verdict that differs on the whole step, not first on the step's "
            "top (the last block and the final norm, which confirm most cheats sooner)",
        ),
    ] = False,
) -> None:
    """Replay a sample of a run's paid rounds on CPU; exit 1 if one does not match. With a
    fraud record's id or an evidence file: re-check its one-step verdict (exit 1: the step
    differs).

    Examples: coloco audit --run-id 0xRUN --fraction 1 --json; coloco audit 3
    """
    if target is not None:
        from coloco_cli.verdict import check_verdict

        url = resolve(rpc_url, ledger_url, deployment).ledger_url
        check_verdict(target, url, json_out=json_out, threads=threads or None, full=full_step)
        return
    if run_id is None:
        raise ConfigError(
            "pass --run-id RUN to replay a run's rounds, or a fraud record's id / an evidence "
            "file to re-check its one-step verdict"
        )
    rid = "0x" + parse_run_id(run_id, what="--run-id").hex()
    if not 0.0 <= fraction <= 1.0:
        raise ConfigError(f"--fraction {fraction} is not a share: pass a number from 0 to 1")
    ep = resolve(rpc_url, ledger_url, deployment)
    # each pair under the version it signed; the data root as the chain has it now
    history = ConfigHistory(open_chain(ep), ep.deployment().deployment_block)
    cfg = history.current
    bps: tuple[int, ...] | None = None
    if mixture is not None:
        try:
            bps = tuple(int(b) for b in mixture.split(","))
        except ValueError:
            raise ConfigError(
                f"--mixture {mixture!r}: pass basis points, comma-separated (e.g. 7000,3000)"
            ) from None
    url = ep.ledger_url
    try:
        with httpx.Client(base_url=url, timeout=60) as http:
            verdicts = audit_rounds(
                http, rid, fraction=fraction, model=model, inner_lr=inner_lr, mixture=bps,
                tolerance=tolerance, segment_tolerance=segment_tolerance, limit=limit,
                inner_steps=inner_steps, corpus_dir=data, data_root=bytes(cfg.data_root),
                config_of=history.get,
            )  # fmt: skip
    except httpx.HTTPError as exc:
        raise LedgerUnavailableError(
            f"ledger at {url} does not answer ({exc.__class__.__name__}): start it or pass "
            "--ledger-url / set COLOCO_LEDGER_URL"
        ) from exc
    failed = sum(v["verdict"] == "fail" for v in verdicts)
    unavailable = sum(v["verdict"] == "unavailable" for v in verdicts)
    unverifiable = sum(v["verdict"] == "unverifiable" for v in verdicts)
    if json_out:
        emit_json({"run_id": rid, "audited": len(verdicts), "failed": failed,
                   "unavailable": unavailable, "unverifiable": unverifiable,
                   "verdicts": verdicts})  # fmt: skip
    else:
        for v in verdicts:
            err = v.get("relative_error")
            detail = f" relative error {err:.2e}" if isinstance(err, float) else ""
            why = f" ({v['reason']})" if v.get("reason") else ""
            typer.echo(f"round {v['round']} node {v['node']}: {v['verdict']}{detail}{why}")
        typer.echo(f"audited {len(verdicts)}, failed {failed}, blobs unavailable {unavailable}, "
                   f"unverifiable {unverifiable}")  # fmt: skip
    if failed:
        raise typer.Exit(1)
