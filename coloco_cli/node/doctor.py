"""`coloco node doctor`: the pre-flight checks a node passes before it joins a run.

Each check is a function returning a :class:`Check` (passed, what it found, and the fix when it
failed); a check that needs something an earlier one could not give (the chain for the stake)
fails with that reason rather than being skipped. Checked: the chain (reachable, the deployment's
chain id), the node's registration and stake, the ledger and the rendezvous (reachable, and that
they are what they claim), the clock against the chain's latest block, the node's data against
the run's pinned data root (``TrainingConfig.dataRoot``), and the free disk and memory the model
preset needs (an estimate: :func:`needs`).
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coloco_cli.common import Endpoints, fmt_units
from protocol.errors import ColocoError

if TYPE_CHECKING:
    from protocol.chain import ChainClient

MAX_BEHIND_S = 15
"""The local clock may be this far behind the chain's latest block (block times are rounded)."""
MAX_AHEAD_S = 600
"""...and this far ahead of it (a quiet devnet mines only when sent a transaction)."""
GIB = 1 << 30


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class DoctorInputs:
    endpoints: Endpoints
    node: str | None
    rendezvous: str | None
    data: Path | None
    preset: str
    checkpoint_dir: Path


def needs(preset: str) -> tuple[int, int, int]:
    """(parameters, bytes of memory, bytes of disk) a node of ``preset`` needs, estimated: memory
    for 8 fp32 copies of the weights (weights, grads, AdamW's 2 moments, the outer base and
    momentum, the pseudo-gradient, the wire buffer) plus 512 MiB for the runtime; disk for 3 kept
    checkpoints (weights and momentum) plus 256 MiB."""
    from reference.model import GPTConfig

    cfg = GPTConfig.preset(preset)
    d = cfg.d_model
    params = (4 + 2 * cfg.mlp_ratio) * cfg.n_layer * d * d + (cfg.vocab_size + cfg.seq_len) * d
    return params, 8 * 4 * params + 512 * (1 << 20), 3 * 2 * 4 * params + 256 * (1 << 20)


def _available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_chain(ep: Endpoints) -> tuple[Check, ChainClient | None]:
    from coloco_cli.tx import open_chain

    try:
        chain = open_chain(ep)
        chain.check_chain()
        head = chain.block_number()
    except ColocoError as exc:
        fix = "start the chain (on a devnet: coloco devnet up) or pass --rpc-url / --deployment"
        return Check("chain", False, f"{ep.rpc_url}: {exc.message}", fix), None
    found = f"{ep.rpc_url}: block {head}, chain id {chain.deployment.chain_id}"
    return Check("chain", True, found), chain


def check_stake(chain: ChainClient | None, node: str | None) -> Check:
    from coloco_cli.node.ops import node_status

    if node is None:
        return Check("stake", False, "no node named", "pass --node 0xNODE (the node's address)")
    if chain is None:
        return Check("stake", False, "the chain is not reachable", "fix the chain check first")
    st = node_status(chain, node)
    if not st.registered:
        fix = f"coloco node register --node-account NAME --payout 0xCOLD (node {st.node})"
        return Check("stake", False, f"node {st.node} is not registered", fix)
    if not st.active:
        missing = fmt_units(max(st.min_stake - st.staked, 0))
        return Check(
            "stake", False,
            f"node {st.node} stakes {fmt_units(st.staked)} ETH, below the minimum "
            f"{fmt_units(st.min_stake)} ETH",
            f"coloco node stake --node {st.node} --amount {missing}",
        )  # fmt: skip
    staked = f"{fmt_units(st.staked)} ETH staked (minimum {fmt_units(st.min_stake)})"
    return Check("stake", True, f"node {st.node} (id {st.node_id}) registered, {staked}")


def check_ledger(ep: Endpoints) -> Check:
    import httpx

    fix = "start it (coloco ledger serve) or pass --ledger-url / set COLOCO_LEDGER_URL"
    try:
        resp = httpx.get(f"{ep.ledger_url}/v1/health", timeout=5.0)
    except httpx.HTTPError as exc:
        return Check("ledger", False, f"{ep.ledger_url} does not answer ({exc!s:.80})", fix)
    try:
        body = resp.json()
        status = body["status"] if isinstance(body, dict) else None
    except ValueError:
        status = None
    if resp.status_code != 200 or status is None:
        return Check(
            "ledger", False,
            f"{ep.ledger_url} answered HTTP {resp.status_code} without a ledger's health: this "
            "is not a coloco ledger", "pass the ledger's URL (--ledger-url), not the chain's",
        )  # fmt: skip
    if status != "ok":
        detail = "; ".join(f"{k}: {v}" for k, v in (body.get("detail") or {}).items())
        return Check("ledger", False, f"{ep.ledger_url} is {status}: {detail or body}",
                     "see the ledger's log and GET /v1/health")  # fmt: skip
    return Check("ledger", True, f"{ep.ledger_url}: ok, indexed block {body.get('indexed_block')}")


def check_rendezvous(rendezvous: str | None) -> Check:
    from trainer.cli import parse_hostport

    if rendezvous is None:
        return Check("rendezvous", False, "no rendezvous named",
                     "pass --rendezvous HOST:PORT (the run's)")  # fmt: skip
    host, port = parse_hostport(rendezvous)
    try:
        with socket.create_connection((host, port), timeout=3.0):
            pass
    except OSError as exc:
        return Check(
            "rendezvous", False, f"{host}:{port} refuses connections ({exc.strerror or exc})",
            "start it (coloco rendezvous serve --port PORT) or pass the run's --rendezvous",
        )  # fmt: skip
    return Check("rendezvous", True, f"{host}:{port} accepts connections")


def check_clock(chain: ChainClient | None) -> Check:
    if chain is None:
        return Check("clock", False, "the chain is not reachable", "fix the chain check first")
    block = int(chain.w3.eth.get_block("latest")["timestamp"])
    skew = time.time() - block
    detail = f"local clock {skew:+.0f} s from the chain's latest block"
    fix = "sync this machine's clock (timedatectl set-ntp true, or chrony/ntpd)"
    if skew < -MAX_BEHIND_S:
        return Check("clock", False, f"{detail}: behind by more than {MAX_BEHIND_S} s", fix)
    if skew > MAX_AHEAD_S:
        why = f"{detail}: ahead by more than {MAX_AHEAD_S} s (or the chain stalled)"
        return Check("clock", False, why, fix + "; or check that the chain produces blocks")
    return Check("clock", True, detail)


def check_data(chain: ChainClient | None, data: Path | None) -> Check:
    from reference.data import Corpus
    from reference.data import check_data as check_corpus
    from reference.manifest import DataMismatch
    from reference.settings import TrainingSettings

    if chain is None:
        return Check("data", False, "the chain is not reachable", "fix the chain check first")
    run_root = bytes(TrainingSettings.read(chain).data_root)
    try:
        corpus = Corpus.load(data)
        check_corpus(corpus, run_root, what="this node's data")
    except DataMismatch as exc:
        return Check("data", False, exc.message,
                     "omit --data (the default corpus) or pass the run's data folder")  # fmt: skip
    except ColocoError as exc:
        return Check("data", False, exc.message, "pass --data with a folder of the run's data")
    return Check("data", True, f"{corpus.name}: {len(corpus.manifest.files)} files, data root "
                 f"0x{run_root.hex()} (the run's)")  # fmt: skip


def check_resources(preset: str, checkpoint_dir: Path) -> Check:
    params, mem_need, disk_need = needs(preset)
    where = checkpoint_dir if checkpoint_dir.exists() else Path.cwd()
    free_disk = shutil.disk_usage(where).free
    free_mem = _available_memory()
    found = (
        f"preset {preset} ({params / 1e6:.1f}M parameters) needs ~{mem_need / GIB:.1f} GiB memory "
        f"and ~{disk_need / GIB:.1f} GiB disk; free: "
        f"{'?' if free_mem is None else f'{free_mem / GIB:.1f}'} GiB memory, "
        f"{free_disk / GIB:.1f} GiB disk at {where}"
    )
    short = []
    if free_mem is not None and free_mem < mem_need:
        short.append("memory")
    if free_disk < disk_need:
        short.append("disk")
    if short:
        return Check("resources", False, f"{found}: not enough {' and '.join(short)}",
                     "free some, or run a smaller --model preset, or --checkpoint-dir on a larger "
                     "disk")  # fmt: skip
    return Check("resources", True, found)


def diagnose(inputs: DoctorInputs) -> list[Check]:
    """Every check, in order (the chain first: the stake, clock and data read it)."""
    ep = inputs.endpoints
    chain_check, chain = check_chain(ep)
    steps: list[tuple[str, Callable[[], Check]]] = [
        ("stake", lambda: check_stake(chain, inputs.node)),
        ("ledger", lambda: check_ledger(ep)),
        ("rendezvous", lambda: check_rendezvous(inputs.rendezvous)),
        ("clock", lambda: check_clock(chain)),
        ("data", lambda: check_data(chain, inputs.data)),
        ("resources", lambda: check_resources(inputs.preset, inputs.checkpoint_dir)),
    ]
    checks = [chain_check]
    for name, step in steps:
        try:
            checks.append(step())
        except ColocoError as exc:  # a check that could not finish is a failed check
            checks.append(Check(name, False, exc.message, "see the message"))
    return checks


def as_json(checks: list[Check]) -> dict[str, Any]:
    return {"ok": all(c.ok for c in checks), "checks": [asdict(c) for c in checks]}
