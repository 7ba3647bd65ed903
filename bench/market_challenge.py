"""`python -m bench.market_challenge [--quick]`: the timed hardware challenge against honest
nodes and planted misclaims made on this machine; the last line is one JSON object.

Each node is a real process (torch on its cores; a node with a memory limit has RLIMIT_AS set
to that much above what it maps after warming up), driven through the challenge's three steps
exactly as the ledger drives them (:mod:`reference.challenge`): issue (fresh seed, one nonce per
device, all devices at once), commitment before each device's deadline, opening checked by the
verifier. An honest node claims what it measured (the median of its own challenge runs at that
shape, refreshed between batches as a node would re-measure); the planted misclaims:

- ``throughput_2x``: twice the measured throughput;
- ``memory_2x``: twice the memory its process may use (the challenge no longer fits);
- ``devices_2x``: two devices on a machine that is one (two nonces share the cores);
- ``shared_machine``: two nodes on one machine each claiming all of it, challenged together.

``verifier_cost_ratio``: the verifier's time over the prover's (issue to opening) at a 512 MiB
memory claim; ``verifier_cost_ratio_small`` the same at the honest runs' size.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import multiprocessing as mp
import os
import resource
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from reference import challenge as ch

log = logging.getLogger("bench.market_challenge")

HONEST_MEMORY = 256 << 20  # the product dominates the fixed costs (process wake-ups, operands)
COST_MEMORY = 512 << 20
NODE_NICE = -20
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_ARENA_MAX": "2"}


def _vm_bytes() -> int:
    for line in open("/proc/self/status").read().splitlines():  # noqa: PTH123, SIM115
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def _raise_priority() -> None:
    """Nice NODE_NICE if allowed: the other jobs of a shared machine are not the node's load."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, NODE_NICE)
    except OSError:
        log.info("cannot raise the nodes' priority: co-tenants' load adds to their noise")


def _node(conn: Connection, threads: int, memory_limit: int) -> None:
    """One node's process: answers challenges (seed, nonce, shape) until sent None."""
    import torch

    _raise_priority()
    torch.set_num_threads(threads)
    warm = ch.Prover(b"w", b"w", ch.Shape(256, 256))
    warm.run(hash_threads=threads)
    warm.open(b"w")
    del warm
    if memory_limit:  # what it maps once warm, and the memory it has
        gc.collect()
        cap = _vm_bytes() + memory_limit
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    conn.send("ready")
    while (job := conn.recv()) is not None:
        seed, nonce, shape = job
        try:
            prover = ch.Prover(seed, nonce, shape)
            root = prover.run(hash_threads=threads)
        except (MemoryError, RuntimeError) as exc:  # torch's allocator raises RuntimeError
            conn.send(("error", f"{type(exc).__name__}: {exc}"[:200], time.time()))
            conn.recv()
            conn.send(("error", "no commitment", 0.0))
            return  # out of memory: the node's process ends, as an OOM kill would end it
        conn.send(("root", root, time.time()))
        key = conn.recv()
        try:
            conn.send(("opening", prover.open(key), time.time()))
        except (MemoryError, RuntimeError) as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"[:200], time.time()))
        del prover
        gc.collect()


@dataclass
class Node:
    proc: Any
    conn: Connection
    threads: int
    memory_limit: int

    def revive(self) -> None:
        """Start the node again if its process ended (out of memory)."""
        if not self.proc.is_alive():
            self.proc.join()
            fresh = start(self.threads, self.memory_limit)
            self.proc, self.conn = fresh.proc, fresh.conn


def start(threads: int, memory_limit: int = 0) -> Node:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_node, args=(child, threads, memory_limit), daemon=True)
    # large blocks straight from mmap and back at free (glibc's adaptive threshold would keep
    # freed challenges on the heap, and a node's address space is what its limit counts)
    saved = {k: os.environ.get(k) for k in MALLOC_ENV}
    os.environ.update(MALLOC_ENV)
    try:
        proc.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if parent.recv() != "ready":
        raise RuntimeError("node process did not start")
    return Node(proc, parent, threads, memory_limit)


def stop(nodes: list[Node]) -> None:
    for n in nodes:
        n.conn.send(None)
        n.proc.join(timeout=30)


@dataclass
class Outcome:
    passed: bool
    reasons: list[str]
    seconds: list[float]  # per device: issue to commitment
    prover_s: float
    verifier_s: float


def challenge(
    devices: list[Node], shape: ch.Shape, flops_per_device: float, latency_s: float = 0.0
) -> Outcome:
    """Issue one challenge per device at once; each device's verdict by the rules of the ledger."""
    seed = os.urandom(32)
    nonces = [os.urandom(32) for _ in devices]
    deadline = ch.deadline_s(shape, flops_per_device, latency_s=latency_s)
    issued = time.time()
    for dev, nonce in zip(devices, nonces, strict=True):
        dev.conn.send((seed, nonce, shape))
    commits = [dev.conn.recv() for dev in devices]
    secret = os.urandom(32)
    keys = []
    for dev, (kind, root, _) in zip(devices, commits, strict=True):
        key = ch.probe_key(secret, 0, root) if kind == "root" else b""
        keys.append(key)
        dev.conn.send(key)
    openings = [dev.conn.recv() for dev in devices]
    for dev, (kind, _, _) in zip(devices, commits, strict=True):
        if kind != "root":
            dev.proc.join(timeout=30)
            dev.revive()
    prover_s = time.time() - issued  # issue to the last opening received
    reasons: list[str] = []
    seconds: list[float] = []
    t0 = time.perf_counter()
    for nonce, (kind, root, at), key, (okind, opening, _) in zip(
        nonces, commits, keys, openings, strict=True
    ):
        if kind != "root":
            reasons.append(f"no commitment: {root}")
            continue
        seconds.append(at - issued)
        if at - issued > deadline:
            reasons.append(f"late: {at - issued:.2f} s > deadline {deadline:.2f} s")
            continue
        if okind != "opening":
            reasons.append(f"no opening: {opening}")
            continue
        try:
            ch.verify(seed, nonce, shape, root, key, opening)
        except ch.ChallengeError as exc:
            reasons.append(f"wrong: {exc}")
    verifier_s = time.perf_counter() - t0
    return Outcome(not reasons, reasons, seconds, prover_s, verifier_s)


def together(calls: list[tuple[list[Node], ch.Shape, float]]) -> list[Outcome]:
    """Several nodes' challenges issued at the same moment (one thread each)."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda c: challenge(*c), calls))


class Claims:
    """What a node measures and claims: the median challenge throughput of its last few runs.

    A short window: on a shared machine the load drifts by 2x within a minute, so a claim from
    the last 9 runs (tens of seconds old) lags it; a node that measures right before it asks
    (``coloco market challenge --measure``) claims what its machine does now."""

    def __init__(self, shape: ch.Shape, window: int = 3) -> None:
        self.shape, self.window, self.times = shape, window, list[float]()

    def add(self, out: Outcome) -> None:
        if out.seconds:
            self.times = [*self.times, max(out.seconds)][-self.window :]

    @property
    def flops(self) -> float:
        return self.shape.flops / statistics.median(self.times)


@dataclass
class Verdict:
    """A claim's verdict over TRIALS challenges (each its own fresh seed and claim): refused
    when a majority of them is refused (:func:`reference.challenge.majority_refused`)."""

    trials: list[Outcome]

    @property
    def passed(self) -> bool:
        return not ch.majority_refused([not t.passed for t in self.trials])

    @property
    def reasons(self) -> list[str]:
        return [r for t in self.trials for r in t.reasons]


def trials(run: Callable[[], Outcome], claims: Claims | None = None) -> Verdict:
    """ch.VERDICT_TRIALS challenges of one claim, one after the other (an honest node's claims
    refreshed from each)."""
    out = []
    for _ in range(ch.VERDICT_TRIALS):
        one = run()
        out.append(one)
        if claims is not None:
            claims.add(one)
    return Verdict(out)


def measure(claims: Claims, node: Node) -> None:
    """The node re-measures (a window of runs) before it claims again."""
    for _ in range(claims.window):
        claims.add(challenge([node], claims.shape, 1.0))


def figures(quick: bool) -> dict[str, Any]:
    _raise_priority()
    cores = len(os.sched_getaffinity(0))
    honest_runs = 100 if quick else 300
    trials_n = 2 if quick else 5
    shape = ch.size(HONEST_MEMORY)
    node, twin = start(cores), start(cores)
    limited = start(cores, memory_limit=HONEST_MEMORY)
    claims = Claims(shape)
    measure(claims, node)  # the node measures before it claims
    fp, single_late, ratios, over_claim = 0, 0, list[float](), list[float]()
    caught: dict[str, int] = {}
    planted: dict[str, int] = {}

    def plant(name: str, out: Verdict) -> None:
        planted[name] = planted.get(name, 0) + 1
        caught[name] = caught.get(name, 0) + (not out.passed)
        log.info("%s: %s %s", name, "caught" if not out.passed else "PASSED", out.reasons[:2])

    def shared() -> Verdict:
        # two nodes on one machine, each claiming all of it, challenged together: caught when
        # the ledger refuses either (each node's verdict over its own trials)
        pairs = [
            together([([node], shape, claims.flops), ([twin], shape, claims.flops)])
            for _ in range(ch.VERDICT_TRIALS)
        ]
        first, second = Verdict([p[0] for p in pairs]), Verdict([p[1] for p in pairs])
        return second if first.passed else first

    per_batch = honest_runs // (trials_n + 1)
    done = 0
    while done < honest_runs:
        for _ in range(min(per_batch, honest_runs - done)):
            who = limited if done % 4 == 3 else node  # a quarter on the memory-limited node

            def honest(who: Node = who) -> Outcome:
                flops = claims.flops
                out = challenge([who], shape, flops)
                ratios.append(out.verifier_s / out.prover_s)
                if out.seconds:
                    over_claim.append(max(out.seconds) * flops / shape.flops)
                return out

            verdict = trials(honest, claims)
            done += 1
            fp += not verdict.passed
            single_late += sum(not t.passed for t in verdict.trials)
            if not verdict.passed:
                log.warning("honest claim refused: %s", verdict.reasons)
        if sum(planted.values()) < 4 * trials_n:
            measure(claims, node)  # fresh, as a node measures before it asks
            flops = claims.flops
            double = ch.size(2 * HONEST_MEMORY)
            plant("throughput_2x", trials(partial(challenge, [node], shape, 2 * flops)))
            plant("memory_2x", trials(partial(challenge, [limited], double, flops)))
            plant("devices_2x", trials(partial(challenge, [node, twin], shape, flops)))
            plant("shared_machine", shared())
            measure(claims, node)
    big = ch.size(COST_MEMORY)
    cost = challenge([node], big, claims.flops)
    stop([node, limited, twin])
    return {
        "challenge_planted": sum(planted.values()),
        "challenge_caught": sum(caught.values()),
        "challenge_caught_by_kind": {k: f"{caught[k]}/{planted[k]}" for k in planted},
        "challenge_honest_runs": honest_runs,
        "challenge_false_positives": fp,
        "challenge_verdict_trials": ch.VERDICT_TRIALS,
        "challenge_single_runs_late": single_late,
        "challenge_honest_time_over_deadline_p50": round(
            statistics.median(over_claim) / ch.SLACK, 3
        ),
        "challenge_honest_time_over_deadline_max": round(max(over_claim) / ch.SLACK, 3),
        "challenge_slack": ch.SLACK,
        "challenge_shape": [shape.n, shape.m],
        "verifier_cost_ratio": round(cost.verifier_s / cost.prover_s, 5),
        "verifier_cost_shape": [big.n, big.m],
        "verifier_cost_ratio_small": round(statistics.median(ratios), 5),
        "claimed_flops": round(claims.flops),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="100 honest runs, 2 of each misclaim")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(json.dumps({"bench": "market_challenge", "quick": args.quick, **figures(args.quick)}))


if __name__ == "__main__":
    main()
