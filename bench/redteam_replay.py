"""Replay tolerance across CPU kernels: the same honest round replayed under each
``ATEN_CPU_CAPABILITY`` (default, avx2, avx512: torch picks its vectorised CPU kernels once, at
import, so each runs in its own process) and torch thread count, compared with the replay the
audit would run (relative L2 error, as ``ledger.judge.replay.audit`` measures it).

Prints one JSON object as its last line: per (capability, threads) the relative L2 error against
the reference (default capability, 1 thread), the largest one, the tolerance
(``COLOCO_LEDGER_AUDIT_TOLERANCE``'s default), the capabilities run and those skipped (a CPU
without AVX-512 dies of SIGILL when forced to it) and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from ledger.core.config import Settings

CAPABILITIES = ("default", "avx2", "avx512")
NODE = "0x1111111111111111111111111111111111111111"
RUN = bytes(range(32))


def replay_once(out: Path, *, steps: int, threads: int, preset: str, rnd: int, lr: float) -> None:
    """The child: one honest round replayed from genesis, saved to ``out``."""
    from ledger.judge.replay import ReplayInputs, replay_pseudo_gradient
    from ledger.judge.usefulness import corpus_of
    from reference.model import GPTConfig
    from trainer.round.recovery import genesis_checkpoint

    torch.set_num_threads(threads)
    cfg = GPTConfig.preset(preset)
    base = genesis_checkpoint(cfg, 0).weights
    inputs = ReplayInputs(RUN, rnd, NODE, steps * 4 * cfg.seq_len, steps, lr, (10_000,), preset)
    torch.save(replay_pseudo_gradient(base, inputs, corpus_of(None)), out)


def supported() -> tuple[str, ...]:
    """The capabilities this CPU can run: torch's best for it and every lesser one."""
    best = torch.backends.cpu.get_cpu_capability().lower()
    return CAPABILITIES[: CAPABILITIES.index(best) + 1] if best in CAPABILITIES else ("default",)


def _flat(t: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([t[n].double().reshape(-1) for n in sorted(t)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--lr", type=float, default=1e-3, help="inner lr (governed: 3e-3)")
    parser.add_argument("--rounds", type=int, default=3, help="distinct shards replayed")
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--child-round", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        replay_once(
            args.child,
            steps=args.steps,
            threads=args.child_threads,
            preset=args.preset,
            rnd=args.child_round,
            lr=args.lr,
        )
        return
    work = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    errors: dict[str, float] = {}
    capabilities = supported()
    for rnd in range(1, args.rounds + 1):
        runs: dict[str, torch.Tensor] = {}
        for cap in capabilities:
            for threads in args.threads:
                out = work / f"{cap}-{threads}-{rnd}.pt"
                env = dict(os.environ, ATEN_CPU_CAPABILITY=cap)
                cmd = [sys.executable, "-m", "bench.redteam_replay", "--child", str(out)]
                cmd += ["--child-threads", str(threads), "--child-round", str(rnd)]
                cmd += ["--steps", str(args.steps), "--preset", args.preset, "--lr", str(args.lr)]
                subprocess.run(cmd, env=env, check=True)
                runs[f"{cap}/{threads}t"] = _flat(torch.load(out))
        ref = runs[f"default/{args.threads[0]}t"]
        for key, vec in runs.items():
            rel = float((vec - ref).norm()) / float(ref.norm())
            errors[key] = max(errors.get(key, 0.0), rel)
    tolerance = Settings.model_fields["audit_tolerance"].default
    worst = max(errors.values())
    print(
        json.dumps(
            {
                "reference": f"default/{args.threads[0]}t",
                "rel_l2_error": {k: float(f"{v:.3g}") for k, v in errors.items()},
                "max_rel_l2_error": float(f"{worst:.3g}"),
                "tolerance": tolerance,
                "capabilities": list(capabilities),
                "skipped": [cap for cap in CAPABILITIES if cap not in capabilities],
                "margin": round(tolerance / worst, 1) if worst else None,
                "rounds": args.rounds,
                "inner_steps": args.steps,
                "inner_lr": args.lr,
                "preset": args.preset,
                "cpu": _cpu(),
                "torch": torch.__version__,
                "load_average_1m": round(os.getloadavg()[0], 2),
            }
        )
    )


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
