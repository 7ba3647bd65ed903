"""Run a broadcasting `forge script` so that a lost transaction fails it in seconds, not hours.

forge sends a script's transactions and then polls for their receipts. If one of them never
reaches the chain's pool, every later nonce queues behind the gap and forge polls for ever (seen
here: 5 transactions queued behind a missing nonce, 21,378 receipt polls in 17 minutes). Two
things bound that:

- the caller passes `--slow`, so forge sends a transaction only once the previous one is mined:
  at most one is ever in flight, and nothing can queue behind it;
- :func:`run_watched` watches forge's process and the chain: the pool (``txpool_status``, where
  the node serves it) holding queued transactions and nothing pending for `stall_s` seconds is a
  nonce gap, and the deployer's nonce not moving for `idle_s` seconds while forge still runs is a
  stall. Either stops forge's whole process group and raises :class:`DeploymentError` naming what
  was seen (the deployer's nonce, the pool's counts, forge's last output).
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from protocol.devnet import rpc_call, stop_pid
from protocol.errors import ChainError, DeploymentError

_POLL_S = 0.25
_GRACE_S = 5.0
_TAIL = 4000


@dataclass(frozen=True)
class Limits:
    """How long a broadcast may go without progress before it is stopped (seconds)."""

    total_s: float = 600.0  # the whole script, however steadily it progresses
    idle_s: float = 120.0  # the deployer's nonce unchanged while forge runs
    stall_s: float = 5.0  # the pool: queued transactions and none pending


@dataclass
class _Seen:
    """What the watch saw of the chain, for the error message."""

    nonce: int | None = None
    nonce_at: float = 0.0
    queued: int = 0
    pending: int = 0
    gap_since: float | None = None

    def describe(self) -> str:
        nonce = "unknown" if self.nonce is None else str(self.nonce)
        return f"deployer nonce {nonce}, pool {self.pending} pending / {self.queued} queued"


def run_watched(
    cmd: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    rpc_url: str,
    sender: str,
    label: str,
    limits: Limits = Limits(),
) -> str:
    """Run `cmd` (a broadcasting forge script, named `label` in errors), return its stdout; raise
    :class:`DeploymentError` if it fails or stalls."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, env=env, stdout=out, stderr=err, text=True, start_new_session=True
        )
        try:
            problem = _watch(proc, rpc_url, sender, limits)
        finally:
            # forge and anything it started (its own process group): TERM, then KILL
            stop_pid(proc.pid, timeout=_GRACE_S)
            proc.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    tail = (stderr.strip() or stdout.strip())[-_TAIL:]
    if problem is not None:
        raise DeploymentError(f"{label}: {problem}; forge's last output:\n{tail}")
    if proc.returncode != 0:
        raise DeploymentError(
            f"{label} failed (exit {proc.returncode}) against {rpc_url}; check the RPC URL "
            f"and that the deployer is funded. forge said:\n{tail}"
        )
    return stdout


def _watch(proc: subprocess.Popen[str], rpc_url: str, sender: str, limits: Limits) -> str | None:
    """None once forge exits by itself; else why it was stopped."""
    start = time.monotonic()
    seen = _Seen(nonce_at=start)
    while proc.poll() is None:
        now = time.monotonic()
        _look(seen, rpc_url, sender, now)
        if seen.gap_since is not None and now - seen.gap_since >= limits.stall_s:
            return (
                f"deploy stalled: {seen.queued} transaction(s) queued behind a missing nonce for "
                f"{limits.stall_s:g} s ({seen.describe()}); a transaction was lost before it "
                "reached the pool: rerun the deploy (its nonces start from the chain's)"
            )
        if now - seen.nonce_at >= limits.idle_s:
            return (
                f"deploy stalled: no transaction of {sender} mined for {limits.idle_s:g} s while "
                f"forge was still running ({seen.describe()}); is the chain mining?"
            )
        if now - start >= limits.total_s:
            return f"deploy did not finish in {limits.total_s:g} s ({seen.describe()})"
        time.sleep(_POLL_S)
    return None


def _look(seen: _Seen, rpc_url: str, sender: str, now: float) -> None:
    """Read the sender's nonce and the pool's counts into `seen` (an unreachable RPC is skipped)."""
    with contextlib.suppress(ChainError):
        nonce = int(rpc_call(rpc_url, "eth_getTransactionCount", [sender, "latest"], 5.0), 16)
        if nonce != seen.nonce:
            seen.nonce, seen.nonce_at = nonce, now
    try:
        status = rpc_call(rpc_url, "txpool_status", timeout=5.0)
    except ChainError:  # a node without the txpool namespace: the nonce watch remains
        return
    seen.queued, seen.pending = int(status["queued"], 16), int(status["pending"], 16)
    if seen.queued and not seen.pending:
        seen.gap_since = seen.gap_since if seen.gap_since is not None else now
    else:
        seen.gap_since = None
