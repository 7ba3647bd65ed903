"""`coloco audit`: an independent replay auditor of a ledger's rounds (level 3).

Reads the rounds of a run from a ledger (``GET /v1/runs/{run}/rounds``), samples the governed
fraction of paid (node, round) pairs with its own draw (a fresh random seed each call, so no node
can predict it; ``--fraction 1`` takes every one), downloads the base checkpoint and the
pseudo-gradient blobs (public once the round is scored), replays the inner steps on CPU from the
base on the declared shard (:mod:`ledger.judge.replay`) and prints one line per pair, then a
summary; with ``--json`` one JSON object ``{"audited", "failed", "unavailable", "verdicts":
[...]}`` instead. Exit code 1 when a replay fails: its verdict carries the evidence (attestation
digest, replay inputs, hashes).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any

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
from coloco_cli.run.ops import parse_run_id
from coloco_cli.tx import open_chain
from ledger.core.config import AUDIT_TOLERANCE
from protocol.attestation import ATTESTATION_ATTRS
from protocol.errors import ConfigError, LedgerError, LedgerUnavailableError
from reference.settings import TrainingSettings


def audit_rounds(
    http: httpx.Client,
    run_id: str,
    *,
    fraction: float,
    model: str,
    inner_lr: float,
    mixture: tuple[int, ...],
    tolerance: float,
    corpus_dir: Path | None = None,
    limit: int = 50,
    inner_steps: int | None = None,
    data_root: bytes | None = None,
) -> list[dict[str, Any]]:
    """Replay the sampled pairs of the run's latest ``limit`` scored rounds; one verdict each.

    ``inner_steps`` (the governed H) lets a time-boxed node's planned shard be found, as the
    ledger's own audit does (``ledger.judge.usefulness.matching_shard``); None: the attested
    tokens. ``data_root`` (the run's ``TrainingConfig.dataRoot``): the corpus is refused
    (DataMismatch) before any replay when it is not the run's data."""
    from ledger.judge.audits import sampled
    from ledger.judge.pseudo_gradients import decode_pseudo_gradient
    from ledger.judge.replay import ReplayInputs, audit
    from ledger.judge.usefulness import corpus_of, matching_shard

    resp = http.get(f"/v1/runs/{run_id}/rounds", params={"limit": limit})
    if resp.status_code != 200:
        raise LedgerError(
            f"ledger answered {resp.status_code} for the rounds of run {run_id}: {resp.text[:300]}"
        )
    rounds = resp.json()
    corpus = corpus_of(corpus_dir, data_root)
    seed = os.urandom(32)  # the auditor's own draw: no node can predict which pairs it replays
    out: list[dict[str, Any]] = []
    for rnd in sorted(rounds, key=lambda x: x["round"]):
        if rnd["state"] not in ("scored", "committed", "final"):
            continue
        for s in rnd["scores"]:
            if not s["verified"] or not sampled(seed, s["node"], fraction):
                continue
            base = _tensors(http, s["base_checkpoint"])
            raw = _tensors(http, s["pseudo_gradient"])
            if base is None or raw is None:
                out.append({"round": rnd["round"], "node": s["node"], "verdict": "unavailable"})
                continue
            tensors, packet, bad = decode_pseudo_gradient(raw, base)
            att = SimpleNamespace(**{k: s[k] for k in ATTESTATION_ATTRS})  # a round's score row
            inputs = ReplayInputs(
                run_id=bytes.fromhex(run_id[2:]),
                round=rnd["round"],
                node=s["node"],
                tokens=s["tokens"],
                inner_steps=s["inner_steps"],
                inner_lr=inner_lr,
                mixture=mixture,
                preset=model,
                data_root=data_root,
                shard_tokens=matching_shard(att, mixture, inner_steps) or 0,  # type: ignore[arg-type]
            )
            if bad is not None:
                out.append(
                    {"round": rnd["round"], "node": s["node"], "verdict": "fail", "reason": bad}
                )
                continue
            v = audit(base, tensors, inputs, corpus, tolerance=tolerance, packet=packet)
            out.append(
                {
                    "round": rnd["round"],
                    "node": s["node"],
                    "digest": s["digest"],
                    "verdict": "pass" if v.passed else "fail",
                    "relative_error": v.rel_error,
                    "submitted": s["pseudo_gradient"],
                    "replayed": v.replayed_hash,
                    "replay_inputs": inputs.to_json(),
                    "reason": v.reason,
                }
            )
    return out


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
        float | None, typer.Option(help="inner lr (default: TrainingConfig's, read on chain)")
    ] = None,
    mixture: Annotated[
        str | None,
        typer.Option(help="data mixture bps, comma-separated (default: TrainingConfig's)"),
    ] = None,
    inner_steps: Annotated[
        int | None,
        typer.Option(min=1, help="governed inner steps H (default: TrainingConfig's)"),
    ] = None,
    tolerance: Annotated[
        float, typer.Option(help="relative L2 error allowed (the ledger's default)")
    ] = AUDIT_TOLERANCE,
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
) -> None:
    """Replay a sample of a run's paid rounds on CPU; exit 1 if one does not match. With a
    fraud record's id or an evidence file: re-check its one-step verdict (exit 1: the step
    differs).

    Examples: coloco audit --run-id 0xRUN --fraction 1 --json; coloco audit 3
    """
    if target is not None:
        from coloco_cli.verdict import check_verdict

        url = resolve(rpc_url, ledger_url, deployment).ledger_url
        check_verdict(target, url, json_out=json_out, threads=threads or None)
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
    cfg = TrainingSettings.read(open_chain(ep))  # as the chain has them now; its data root always
    if inner_lr is None or mixture is None or inner_steps is None:
        inner_lr = cfg.inner_lr if inner_lr is None else inner_lr
        mixture = ",".join(map(str, cfg.data_mixture_bps)) if mixture is None else mixture
        inner_steps = cfg.inner_steps if inner_steps is None else inner_steps
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
                tolerance=tolerance, limit=limit, inner_steps=inner_steps, corpus_dir=data,
                data_root=bytes(cfg.data_root),
            )  # fmt: skip
    except httpx.HTTPError as exc:
        raise LedgerUnavailableError(
            f"ledger at {url} does not answer ({exc.__class__.__name__}): start it or pass "
            "--ledger-url / set COLOCO_LEDGER_URL"
        ) from exc
    failed = sum(v["verdict"] == "fail" for v in verdicts)
    unavailable = sum(v["verdict"] == "unavailable" for v in verdicts)
    if json_out:
        emit_json({"run_id": rid, "audited": len(verdicts), "failed": failed,
                   "unavailable": unavailable, "verdicts": verdicts})  # fmt: skip
    else:
        for v in verdicts:
            err = v.get("relative_error")
            detail = f" relative error {err:.2e}" if isinstance(err, float) else ""
            why = f" ({v['reason']})" if v.get("reason") else ""
            typer.echo(f"round {v['round']} node {v['node']}: {v['verdict']}{detail}{why}")
        typer.echo(f"audited {len(verdicts)}, failed {failed}, blobs unavailable {unavailable}")
    if failed:
        raise typer.Exit(1)
