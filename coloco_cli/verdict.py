"""`coloco audit <fraud id | evidence file>`: re-check a one-step verdict in one inner step.

The ledger bisects a failed segment of a node's round down to one step (ledger.judge.bisect) and
publishes the evidence with the fraud record (``GET /v1/frauds/{id}/verdict``): the node's own
state before the step, the batch it read, the lr, its claimed state after (reference.verdict).
This command fetches the evidence (from the ledger by fraud id, or a JSON file: the evidence
itself or the ledger's answer holding it), fetches the three blobs it names from the ledger
(``/v1/blobs/{hash}``; each must hash to its name) and replays the one step on CPU: ``holds``
(the node's next state is its step's replay, within the one-step tolerance) or ``differs``
(naming the step). Its cost is one inner step plus hashing the two states and building the
model, on one thread by default (``--threads``): ``python -m bench.audit --verdict``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import typer

from coloco_cli.common import emit_json
from protocol.errors import ConfigError, LedgerError, LedgerUnavailableError

MAX_BLOB = 1 << 34


def load_evidence(target: str, http: httpx.Client) -> dict[str, Any]:
    """The evidence JSON of ``target``: a fraud record's id (asked of the ledger) or a file."""
    path = Path(target)
    if target.isdigit() and not path.exists():
        resp = http.get(f"/v1/frauds/{int(target)}/verdict")
        if resp.status_code != 200:
            try:
                why = str(resp.json()["error"]["message"])
            except (ValueError, KeyError, TypeError):
                why = resp.text[:300]
            raise LedgerError(f"ledger answered {resp.status_code}: {why}")
        doc = resp.json()
    elif path.is_file():
        try:
            doc = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not JSON ({exc}): pass a verdict's evidence") from None
    else:
        raise ConfigError(
            f"{target!r} is neither a fraud record's id nor an evidence file: pass the id "
            "GET /v1/frauds lists, or a JSON file of the evidence"
        )
    if isinstance(doc, dict) and "evidence" in doc and "kind" not in doc:
        if doc["evidence"] is None:
            raise ConfigError(
                f"the bisection of {target} is not done ({doc.get('state')}, interval "
                f"{doc.get('interval')}, waiting on the node's state after {doc.get('probe')} "
                "steps): try again later"
            )
        doc = doc["evidence"]
    if not isinstance(doc, dict):
        raise ConfigError(f"{target}: the evidence is not a JSON object")
    return doc


def check_verdict(
    target: str, ledger_url: str, *, json_out: bool, threads: int | None, full: bool = False
) -> None:
    """Fetch ``target``'s evidence and blobs, replay its step (a verdict that differs: the
    step's top first, reference.confirm; ``full``: the whole step), print the verdict."""
    from protocol.blobs import tensors_of_buffer
    from reference.verdict import Evidence, recheck

    def fetch(blob_hash: str) -> Any:
        resp = http.get(f"/v1/blobs/{blob_hash}")
        if resp.status_code != 200:
            raise LedgerError(
                f"ledger answered {resp.status_code} for blob {blob_hash} the evidence names"
            )
        # read-only views of the response's bytes, no copy (the replay copies what it loads)
        return tensors_of_buffer(memoryview(resp.content), max_bytes=MAX_BLOB)

    try:
        with httpx.Client(base_url=ledger_url, timeout=60) as http:
            evidence = Evidence.from_json(load_evidence(target, http))
            out = recheck(evidence, fetch, threads=threads, full=full)
    except httpx.HTTPError as exc:
        raise LedgerUnavailableError(
            f"ledger at {ledger_url} does not answer ({exc.__class__.__name__}): start it or "
            "pass --ledger-url / set COLOCO_LEDGER_URL"
        ) from exc
    doc = out.to_json()
    if json_out:
        emit_json(doc)
    else:
        e = evidence
        where = f"round {e.round} node {e.node}, step {e.step} (lr {e.lr:.4g})"
        if out.holds:
            typer.echo(f"holds: {where} replays within {doc['tolerance']:g} of the node's next "
                       f"state (error {doc['error']:.3g})")  # fmt: skip
        else:
            err = "inf" if doc["error"] is None else format(doc["error"], ".3g")
            typer.echo(f"differs: {where}: the node's claimed next state is {err} away from "
                       f"the replay of that step from its own state (tolerance "
                       f"{doc['tolerance']:g})")  # fmt: skip
        if not doc["agrees_with_ledger"]:
            typer.echo(f"the ledger's verdict was {doc['ledger_said']}: this replay disagrees")
        if out.scope == "top":
            typer.echo(
                f"confirmed on the step's top (the last block and the final norm, "
                f"{doc['params_replayed']:,} parameters, threshold {doc['tolerance']:g}), "
                f"{doc['cpu_seconds']:.2f} CPU s; --full-step replays the whole step"
            )
        else:
            typer.echo(f"one inner step, {doc['cpu_seconds']:.2f} CPU s")
    if not out.holds:
        raise typer.Exit(1)
