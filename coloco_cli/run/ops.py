"""What an organiser does with a run, as functions (`coloco run ...` and the demo call them).

A run is its 32-byte id (a name's sha256, or 0x + 64 hex digits, as `node run --run-id` takes
it). Opening it asks the ledger (admin token) to commit the genesis weights' hash as round 0 on
chain, then uploads the weights (the ledger takes an unsigned upload only of a checkpoint a run
names); from then on the ledger accepts attestations for the run.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from coloco_cli.logs import event_logs
from protocol.errors import ConfigError, LedgerError, LedgerUnavailableError

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)


def parse_run_id(text: str, *, what: str = "run") -> bytes:
    """The same rule as `coloco node run --run-id`: 0x + 64 hex digits, or a name (its sha256).
    Every command taking a run (`run`, `model`, `audit`, `fund`, `code`) resolves it here; `what`
    names the argument in the error (the positional RUN unless the command takes a flag)."""
    from trainer.cli import parse_run_id as trainer_parse

    return trainer_parse(text, what=what)


def run_hex(run_id: bytes) -> str:
    return "0x" + run_id.hex()


def genesis(model: str, seed: int) -> tuple[bytes, bytes]:
    """(canonical weights hash, safetensors blob) of the preset's genesis weights for `seed`."""
    from protocol.blobs import encode_blob
    from reference.model import GPTConfig
    from trainer.round.recovery import genesis_checkpoint

    ckpt = genesis_checkpoint(GPTConfig.preset(model), seed)
    return bytes(ckpt.weights_hash), encode_blob(ckpt.weights)


def _ledger_call(method: str, url: str, **kwargs: Any) -> httpx.Response:
    try:
        return httpx.request(method, url, timeout=kwargs.pop("timeout", 60.0), **kwargs)
    except httpx.HTTPError as exc:
        raise LedgerUnavailableError(
            f"ledger at {url} does not answer ({exc.__class__.__name__}): check --ledger-url "
            "or start one with `coloco ledger serve`"
        ) from exc


@dataclass(frozen=True)
class Opened:
    run_id: str
    genesis_checkpoint: str
    tx_hash: str | None
    already_open: bool


def open_run(
    chain: ChainClient,
    ledger_url: str,
    admin_token: str,
    run_id: bytes,
    *,
    genesis_hash: bytes,
    blob: bytes,
    name: str | None = None,
    timeout: float = 120.0,
) -> Opened:
    """Upload the genesis blob, have the ledger commit it as round 0; checked on chain. `name`
    (the text `run_id` is the sha256 of) is kept by the ledger for its dashboard."""
    from protocol.types import RoundNumber, RunId

    rid = RunId(run_id)
    if chain.has_committed(rid):
        onchain = bytes(chain.checkpoint_of(rid, RoundNumber(0)))
        if onchain != genesis_hash:
            raise ConfigError(
                f"run {run_hex(run_id)} is already open with genesis 0x{onchain.hex()}, not "
                f"0x{genesis_hash.hex()}: pick another run id, or the --model/--seed it used"
            )
    body = {"run_id": run_hex(run_id), "genesis_checkpoint": "0x" + genesis_hash.hex()}
    if name is not None:
        body["name"] = name
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        resp = _ledger_call(
            "POST",
            f"{ledger_url}/v1/runs",
            json=body,
            headers={"Authorization": f"Bearer {admin_token}"},
        )
        last = f"{resp.status_code}: {resp.text[:300]}"
        if resp.status_code in (401, 403):
            raise LedgerError(
                f"the ledger refused the admin token ({last}): pass the ledger's "
                "COLOCO_LEDGER_ADMIN_TOKEN with --admin-token"
            )
        if resp.status_code == 503:
            raise LedgerError(
                f"the ledger cannot commit ({last}): start it with a committer key "
                "(on a devnet `coloco ledger serve` uses the deployment's committer)"
            )
        if 400 <= resp.status_code < 500:
            raise LedgerError(f"the ledger refused to open the run ({last})")
        tx = resp.json().get("tx_hash") if resp.status_code == 201 else None
        if chain.has_committed(rid):
            onchain = bytes(chain.checkpoint_of(rid, RoundNumber(0)))
            if onchain != genesis_hash:
                raise LedgerError(f"round 0 was committed with 0x{onchain.hex()}, not the genesis")
            _upload_genesis(ledger_url, genesis_hash, blob)
            return Opened(run_hex(run_id), "0x" + genesis_hash.hex(), tx, already_open=False)
        if time.monotonic() > deadline:
            raise LedgerError(f"the ledger did not commit round 0 within {timeout:.0f}s: {last}")
        log.info("round 0 not on chain yet (%s); asking again", last)
        time.sleep(1.0)


def _upload_genesis(ledger_url: str, genesis_hash: bytes, blob: bytes) -> None:
    """The genesis weights to the ledger's store, once the run names them (then anyone may)."""
    resp = _ledger_call(
        "PUT",
        f"{ledger_url}/v1/blobs/0x{genesis_hash.hex()}",
        content=blob,
        headers={"Content-Type": "application/octet-stream"},
    )
    if resp.status_code not in (200, 201):
        raise LedgerError(f"the ledger refused the genesis blob ({resp.status_code}: {resp.text})")


def close_run(
    ledger_url: str, admin_token: str, run_id: bytes, final_round: int | None = None
) -> dict[str, Any]:
    """Ask the ledger (admin) to close the run: rounds in flight finish, later ones are refused.

    Returns the ledger's answer: run_id, genesis_checkpoint, last_committed, closed, final_round.
    """
    resp = _ledger_call(
        "POST",
        f"{ledger_url}/v1/runs/{run_hex(run_id)}/close",
        json={"final_round": final_round},
        headers={"Authorization": f"Bearer {admin_token}"},
    )
    what = f"{resp.status_code}: {resp.text[:300]}"
    if resp.status_code in (401, 403):
        raise LedgerError(
            f"the ledger refused the admin token ({what}): pass the ledger's "
            "COLOCO_LEDGER_ADMIN_TOKEN with --admin-token"
        )
    if resp.status_code == 404:
        raise ConfigError(f"run {run_hex(run_id)} was never opened: nothing to close ({what})")
    if resp.status_code != 200:
        raise LedgerError(f"the ledger did not close the run ({what})")
    answer: dict[str, Any] = resp.json()
    return answer


def run_status(
    chain: ChainClient, ledger_url: str, run_id: bytes, limit: int = 10
) -> dict[str, Any]:
    """The run on chain (open? last round, its checkpoint) and its latest rounds at the ledger."""
    from protocol.types import RoundNumber, RunId

    rid = RunId(run_id)
    opened = chain.has_committed(rid)
    last = int(chain.last_round(rid)) if opened else None
    checkpoint = (
        "0x" + bytes(chain.checkpoint_of(rid, RoundNumber(last))).hex()
        if last is not None
        else None
    )
    rounds: list[dict[str, Any]] | None = None
    closed: int | None = None
    try:
        info = httpx.get(f"{ledger_url}/v1/runs/{run_hex(run_id)}", timeout=10)
        if info.status_code == 200 and info.json().get("closed"):
            closed = int(info.json()["final_round"])
        resp = httpx.get(
            f"{ledger_url}/v1/runs/{run_hex(run_id)}/rounds", params={"limit": limit}, timeout=10
        )
        if resp.status_code == 200:
            rounds = [
                {
                    "round": r["round"],
                    "state": r["state"],
                    "members": len(r.get("members", [])),
                    "checkpoint": r.get("checkpoint"),
                    "tx_hash": r.get("tx_hash"),
                    "note": r.get("note"),
                }
                for r in resp.json()
            ]
    except httpx.HTTPError as exc:
        log.debug("ledger %s not reachable: %s", ledger_url, exc)
    return {
        "run_id": run_hex(run_id),
        "open": opened,
        "last_round": last,
        "checkpoint": checkpoint,
        "ledger_rounds": rounds,
        "closed_after_round": closed,
    }


def list_runs(chain: ChainClient, from_block: int) -> list[dict[str, Any]]:
    """Every run opened on this deployment: the round-0 `RoundCommitted` logs, oldest first."""
    from protocol.types import RunId

    out = []
    for ev in event_logs(
        chain,
        "ContributionLedger",
        "RoundCommitted",
        from_block=from_block,
        argument_filters={"round": 0},
    ):
        run_id = bytes(ev.args.runId)
        out.append(
            {
                "run_id": run_hex(run_id),
                "opened_block": int(ev.blockNumber),
                "genesis_checkpoint": "0x" + bytes(ev.args.checkpointHash).hex(),
                "last_round": int(chain.last_round(RunId(run_id))),
            }
        )
    return out
