"""`python -m bench.ledger [--database sqlite|postgres] [--quick]`: ledger HTTP throughput.

Starts a real anvil, deploys the contracts, registers and stakes real nodes, starts
`coloco ledger serve` (one uvicorn worker, pinned to one core when the machine has two), commits
a genesis, and drives the API over HTTP on 127.0.0.1 from another process (pinned to the other
core, with anvil and PostgreSQL: the ledger's core is its own) with pre-signed, valid
attestations, each a distinct (node, round):

- single: POST /v1/attestations, closed loop, 8 connections -> ``single_per_s``;
- batch: POST /v1/attestations/batch with 100 items per request -> ``batch_per_s`` (items/s);
- latency: POST /v1/attestations at 500 requests/s offered (open loop) -> ``p50_ms``, ``p99_ms``;
- reads: each of the mixed phase's reads alone, one after another -> ``read_cpu_ms`` (server CPU
  a read) and ``read_wall_ms`` by kind;
- mixed: 256 connections at once, each a closed loop mixing writes with reads of rounds, a node
  and a payout's rewards (one in three) -> ``mixed_errors``, ``mixed_max_ms``.

Commits are durable: PostgreSQL runs with fsync, full_page_writes and synchronous_commit on
(read back from the server: ``durable``); SQLite with ``--synchronous FULL`` fsyncs its WAL at
every commit (``durable: true``), with NORMAL (the default) a commit survives a process kill
but not a power loss (``durable: false``).

Every request must answer 202 (``errors`` counts the others). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.harness.nodes import attestation, domain_of, h, new_node
from bench.ledger_client import run_phase
from protocol.deploy import deploy
from protocol.devnet import AnvilProcess, free_port, stop_pid
from protocol.signing import sign_attestation
from protocol.toolchain import REPO_ROOT

log = logging.getLogger("bench.ledger")
ADMIN = "bench-admin-token-0123456789abcdef"
NODES = 20
BATCH = 100


def _cpus() -> tuple[int | None, int | None]:
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)


def _presign(
    nodes: list[Any], run_id: str, domain: Any, count: int, first_round: int
) -> list[bytes]:
    genesis = h("bench-genesis")
    out = []
    for i in range(count):
        node = nodes[i % len(nodes)]
        rnd = first_round + i // len(nodes)
        att = attestation(
            node, run_id=run_id, round_=rnd, base=genesis, result=h(f"r{rnd}"), tokens=1000 + i
        )
        sig = sign_attestation(att, domain, node.key)
        out.append(orjson.dumps({"attestation": att.to_json(), "signature": "0x" + sig.hex()}))
    return out


def _start_server(
    env: dict[str, str], port: int, cpu: int | None, logfile: Path, profile: Path | None = None
) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "coloco_cli", "ledger", "serve", "--host", "127.0.0.1",
            "--port", str(port), "--log-level", "warning"]  # fmt: skip
    if profile is not None:  # bench.profile_server: the same command under a profiler
        argv[1:3] = ["-m", "bench.profile_server", str(profile)]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu), *argv]
    with logfile.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ledger exited {proc.returncode}: {logfile.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"ledger did not answer: {logfile.read_text()[-2000:]}")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pin_helpers(cpu: int | None, anvil_pid: int) -> None:
    """Anvil and every PostgreSQL process on ``cpu`` (the client's core; backends forked later
    inherit the postmaster's), so that the ledger's core is its own: another process there
    inflated its CPU per request and its figures swung with whatever else ran."""
    if cpu is None:
        return
    pids = [anvil_pid]
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "postgres":
                pids.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile
    for pid in pids:
        try:
            os.sched_setaffinity(pid, {cpu})
        except OSError:
            continue


def _server_pid(proc: subprocess.Popen[bytes]) -> int:
    """The python process under ``taskset`` (taskset execs, so it is the same pid)."""
    return proc.pid


def _pg_durable(url: str) -> bool:
    """Whether the server really runs with fsync, full_page_writes and synchronous_commit on."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        values = {
            name: conn.execute(text(f"SHOW {name}")).scalar()
            for name in ("fsync", "full_page_writes", "synchronous_commit")
        }
    engine.dispose()
    log.info("postgres durability: %s", values)
    return all(v == "on" for v in values.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    parser.add_argument(
        "--synchronous",
        choices=("NORMAL", "FULL"),
        default="NORMAL",
        type=str.upper,
        help="SQLite: FULL fsyncs the WAL at every commit (durable)",
    )
    parser.add_argument("--mixed-connections", type=int, default=256)
    parser.add_argument(
        "--phases",
        default="single,batch,latency,reads,mixed",
        help="comma-separated phases to run (profiling one phase); the JSON has only theirs",
    )
    parser.add_argument(
        "--profile", type=Path, help="write the server's CPU profile here (pstats; see "
        "bench.profile_server); the rates are then not comparable"
    )  # fmt: skip
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally block cleans up
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    n_single, n_batch, seconds = (1000, 2000, 2) if args.quick else (5000, 20000, 10)
    mixed_s, n_mixed = (4.0, 1000) if args.quick else (20.0, 4000)
    n_latency = 500 * seconds
    server_cpu, client_cpu = _cpus()
    work = Path(tempfile.mkdtemp(prefix="bench-ledger-"))
    anvil = AnvilProcess.start(work / "anvil")
    pg = None
    server = None
    try:
        dep_path = work / "deployment.json"
        dep = deploy(
            anvil.rpc_url, anvil.accounts[0][1], committer=anvil.accounts[1][0], out_path=dep_path
        )
        nodes = [new_node(anvil.w3, dep, anvil.accounts[2 + i % 8][0]) for i in range(NODES)]
        if args.database == "postgres":
            from bench.harness.postgres import PostgresServer

            pg = PostgresServer.start(durable=True)
            db_url = pg.create_database("bench_ledger")
            durable = _pg_durable(db_url)
        else:
            db_url = f"sqlite:///{work / 'ledger.db'}"
            durable = args.synchronous == "FULL"
        env = {
            "COLOCO_LEDGER_ENVIRONMENT": "test",
            "COLOCO_LEDGER_RPC_URL": anvil.rpc_url,
            "COLOCO_LEDGER_DEPLOYMENT": str(dep_path),
            "COLOCO_LEDGER_COMMITTER_PRIVATE_KEY": anvil.accounts[1][1],
            "COLOCO_LEDGER_DATABASE_URL": db_url,
            "COLOCO_LEDGER_BLOB_DIR": str(work / "blobs"),
            "COLOCO_LEDGER_ADMIN_TOKEN": ADMIN,
            "COLOCO_LEDGER_ROUND_WINDOW": "1000000",
            "COLOCO_LEDGER_ROUND_DEADLINE_S": "36000",
            "COLOCO_LEDGER_MAX_BATCH_ITEMS": str(BATCH),
            "COLOCO_LEDGER_SQLITE_SYNCHRONOUS": args.synchronous,
        }
        _pin_helpers(client_cpu, anvil.pid)
        port = free_port()
        server = _start_server(env, port, server_cpu, work / "ledger.log", args.profile)
        url = f"http://127.0.0.1:{port}"
        run_id = h("bench-run")
        r = httpx.post(
            f"{url}/v1/runs",
            json={"run_id": run_id, "genesis_checkpoint": h("bench-genesis")},
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=60,
        )
        r.raise_for_status()
        time.sleep(1.5)  # the indexer sees the genesis commit
        domain = domain_of(dep)
        total = 200 + n_single + n_batch + n_latency + n_mixed
        log.info("pre-signing %d attestations", total)
        bodies = _presign(nodes, run_id, domain, total, 1)
        warm, single = bodies[:200], bodies[200 : 200 + n_single]
        rest = bodies[200 + n_single :]
        batch_items, latency = rest[:n_batch], rest[n_batch : n_batch + n_latency]
        mixed = rest[n_batch + n_latency :]
        reads = {  # the mixed phase's reads, in turn
            "rounds": f"/v1/runs/{run_id}/rounds?limit=5",
            "node": f"/v1/nodes/{nodes[0].address}?limit=20",
            "rewards": f"/v1/rewards/{nodes[1].payout}?limit=20",
        }
        batches = [
            b'{"items":[' + b",".join(batch_items[i : i + BATCH]) + b"]}"
            for i in range(0, len(batch_items), BATCH)
        ]
        ctx = get_context("spawn")
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:

            def phase(
                kind: str, path: str, data: list[bytes], arg: float, **kw: Any
            ) -> dict[str, Any]:
                before = _cpu_seconds(_server_pid(server))
                out = pool.submit(
                    run_phase, kind, "127.0.0.1", port, path, data, arg=arg, cpu=client_cpu, **kw
                ).result()
                out["server_cpu_s"] = _cpu_seconds(_server_pid(server)) - before
                return out

            wanted = set(args.phases.split(","))
            phase("closed", "/v1/attestations", warm, 4)
            result: dict[str, Any] = {"database": args.database}
            errors = 0
            if "single" in wanted:
                log.info("phase single: start")
                s = phase("closed", "/v1/attestations", single, 8)
                log.info("single: %s", s)
                errors += s["errors"]
                result["single_per_s"] = round(s["requests"] / s["elapsed_s"], 1)
                result["single_per_cpu_s"] = round(n_single / max(s["server_cpu_s"], 1e-9), 1)
            if "batch" in wanted:
                log.info("phase batch: start")
                b = phase("closed", "/v1/attestations/batch", batches, 2)
                log.info("batch: %s", b)
                errors += b["errors"]
                result["batch_per_s"] = round(len(batch_items) / b["elapsed_s"], 1)
                result["batch_per_cpu_s"] = round(n_batch / max(b["server_cpu_s"], 1e-9), 1)
                time.sleep(2.0)  # let the worker's WAL checkpoint after the batch phase finish
            if "latency" in wanted:
                log.info("phase latency: start")
                lat = phase("open", "/v1/attestations", latency, 500)
                log.info("latency: %s", lat)
                errors += lat["errors"]
                result.update(
                    p50_ms=round(lat["p50_ms"], 2),
                    p99_ms=round(lat["p99_ms"], 2),
                    max_ms=round(lat["max_ms"], 2),
                    offered_rps=500,
                    achieved_rps=round(lat["achieved_rps"], 1),
                )
            if "reads" in wanted:  # each read alone: its server CPU and wall time
                n_reads = 50 if args.quick else 300
                before = _cpu_seconds(_server_pid(server))
                time.sleep(2.0)  # what the server spends idle (its worker's ticks), beside
                result["idle_cpu_ms_per_s"] = round(
                    1000 * (_cpu_seconds(_server_pid(server)) - before) / 2.0, 1
                )
                for kind, path in reads.items():
                    one = phase("reads", path, [], n_reads)
                    errors += one["errors"]
                    result.setdefault("read_cpu_ms", {})[kind] = round(
                        1000 * one["server_cpu_s"] / n_reads, 3
                    )
                    result.setdefault("read_wall_ms", {})[kind] = round(
                        1000 * one["elapsed_s"] / n_reads, 3
                    )
                log.info("reads: cpu %s, wall %s", result["read_cpu_ms"], result["read_wall_ms"])
            result["errors"] = errors
            if "mixed" in wanted:
                log.info("phase mixed: start")
                mix = phase(
                    "mixed",
                    "/v1/attestations",
                    mixed,
                    args.mixed_connections,
                    reads=list(reads.values()),
                    seconds=mixed_s,
                )
                log.info("mixed: %s", mix)
                result.update(
                    mixed_connections=args.mixed_connections,
                    mixed_requests=mix["requests"],
                    mixed_reads=mix["reads"],
                    mixed_reads_by_kind={
                        kind: mix["reads_by_path"][path] for kind, path in reads.items()
                    },
                    mixed_errors=mix["errors"],
                    mixed_p99_ms=round(mix["p99_ms"] or 0, 1),
                    mixed_max_ms=round(mix["max_ms"] or 0, 1),
                    mixed_read_max_ms=round(mix["read_max_ms"], 1),
                    mixed_write_max_ms=round(mix["write_max_ms"], 1),
                    mixed_per_s=round(mix["requests"] / mix["elapsed_s"], 1),
                    mixed_server_cpu_s=round(mix["server_cpu_s"], 2),
                )
            log.info("phases done")
        health = httpx.get(f"{url}/v1/health", timeout=10).json()
        result.update(
            durable=durable,
            sqlite_synchronous=args.synchronous if args.database == "sqlite" else None,
            requests={"single": n_single, "batch_items": n_batch, "latency": n_latency},
            phases=sorted(wanted),
            server_cpu=server_cpu,
            client_cpu=client_cpu,
            quick=args.quick,
            health=health["status"],
            load_average_1m=round(os.getloadavg()[0], 2),
        )
    finally:
        if server is not None:
            stop_pid(server.pid, timeout=120 if args.profile else 10)
        anvil.stop()
        if pg is not None:
            pg.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
