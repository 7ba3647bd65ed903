"""`python -m bench.faults [--quick] [--only NAME ...]`: the ledger under faults, real processes.

One anvil with the contracts and staked nodes; per scenario a fresh `coloco ledger serve`
process, a fresh run and database, signed attestations posted over HTTP by a load generator that
retries what was not acknowledged:

- ``kill9``: the ledger is killed with SIGKILL under write load and restarted (SQLite);
- ``postgres_restart``: PostgreSQL restarted under write load;
- ``rpc_outage``: the ledger's RPC cut for 60 s (quick: 6 s; longer, up to 5 x, until a round
  closed, so a loaded machine does not fail it) under load: rounds keep closing, settlement
  resumes after;
- ``reorg``: a reorg of depth 3 drops a mined settlement (confirmations 4): it is sent again;
- ``blob_disk_full``: blob uploads until the blob disk (a 4 MiB tmpfs; without root, the free
  space reserve) is full: a clear 507, no partial file, every stored blob intact;
- ``soak``: 1,000 attestations/s for 10 minutes (quick: 10 s) in batches: nothing lost, RSS flat.
- ``ledger_outage``: two real trainer nodes (``bench.fault_nodes``) train 6 rounds; the ledger is
  killed with SIGKILL once both joined round 3, and restarted on the same database 60 s later
  (quick: 8 s; and not before both nodes' journals hold round 3): every attestation the nodes
  signed is stored (``accepted`` counts the signed ones), each node attests again within 2 rounds.

Per scenario ``passed``, ``accepted`` (acknowledged 202), ``stored`` (of those, found in the
ledger's database afterwards), ``settled_twice`` (commitRound transactions beyond one per round,
counted from the chain's blocks: a reverted duplicate counts). Last line: one JSON object with the
scenarios and ``scenarios``, ``passed``, ``lost``, ``double_settlements``.

``kill9``, ``rpc_outage`` and ``reorg`` also lease two nodes of their run for every round
(``bench.fault_leases``): each lease must be paid exactly its node's verified rounds
(``lease_unpaid_rounds``, ``lease_double_paid_rounds``: 0), a second claim refused, and the rest
refunded (check ``leases_paid_exactly``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.fault_leases import LeaseCheck
from bench.fault_rig import (
    LedgerProc,
    Load,
    Rig,
    SwitchableRpc,
    Work,
    genesis_of,
    result_of,
    wait_for,
)
from bench.harness.nodes import domain_of, h, new_node
from bench.ledger import ADMIN
from protocol.blob_auth import UploadSigner
from protocol.blobs import encode_blob
from protocol.deploy import deploy
from protocol.devnet import AnvilProcess
from protocol.hashing import hash_state_dict

log = logging.getLogger("bench.faults")
NODES = 8


def _outcome(load: Load, led: LedgerProc, counts: dict[int, int], **extra: Any) -> dict[str, Any]:
    """The scenario's figures. A refusal is an error unless the attestation is stored anyway
    (a retry after a lost answer, refused as ``round_closed`` once its round had closed)."""
    stored = led.stored(load.accepted)
    refused_not_stored = len(load.refused_digests) - led.stored(load.refused_digests)
    twice = sum(c - 1 for c in counts.values() if c > 1)
    checks = extra.pop("checks", {})
    checks["nothing_refused_unstored"] = refused_not_stored == 0
    passed = stored == len(load.accepted) and twice == 0 and all(checks.values())
    return {
        "passed": passed,
        "accepted": len(load.accepted),
        "stored": stored,
        "settled_twice": twice,
        "checks": checks,
        "refused": load.refused[:5],
        "refused_but_stored": len(load.refused_digests) - refused_not_stored,
        "retries": load.failures,
        **extra,
    }


def ledger_outage(rig: Rig) -> dict[str, Any]:
    """Real nodes through a ledger outage (module docstring)."""
    from datetime import timedelta

    import torch.distributed as dist

    from bench.fault_nodes import MODEL, NodePlan, node_main, signed
    from bench.harness import forked
    from protocol.devnet import free_port
    from trainer.round.journal import lost_rounds, unsent_rounds
    from trainer.round.recovery import genesis_hash

    rounds, outage_s = 6, (8.0 if rig.quick else 60.0)
    led = rig.ledger("ledger_outage", round_window="2", join_window_s="0.5",
                     round_deadline_s="600")  # fmt: skip
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,  # type: ignore[attr-defined]
                          timeout=timedelta(seconds=60))  # fmt: skip
    run_id = h(f"faults/ledger_outage/{time.time_ns()}")
    r = httpx.post(f"{led.url}/v1/runs", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120,
                   json={"run_id": run_id,
                         "genesis_checkpoint": "0x" + genesis_hash(MODEL, 0).hex()})  # fmt: skip
    r.raise_for_status()
    states = [rig.work / "ledger_outage" / f"node{i}" for i in range(2)]
    ctx = forked.context("bench.fault_nodes")
    plans = [NodePlan("0x" + rig.nodes[i].key.hex(), str(s), bytes.fromhex(run_id[2:]), port,
                      rig.anvil.rpc_url, str(rig.dep_path), led.url, rounds)
             for i, s in enumerate(states)]  # fmt: skip
    procs = [forked.process(node_main, (p,)) for p in plans]
    del ctx
    members = {str(rig.nodes[i].address) for i in range(2)}

    def joined(rnd: int) -> bool:
        try:
            got = httpx.get(f"{led.url}/v1/runs/{run_id}/rounds/{rnd}/members", timeout=5)
        except httpx.HTTPError:
            return False
        return got.status_code == 200 and set(got.json().get("members", [])) == members

    try:
        for proc in procs:
            proc.start()
        if not wait_for(lambda: joined(3), 600, 0.1):
            raise RuntimeError("the nodes never both joined round 3")
        led.kill9()
        killed = time.monotonic()
        held = wait_for(lambda: time.monotonic() - killed >= outage_s
                        and all(3 in unsent_rounds(s) for s in states), 600, 0.2)  # fmt: skip
        down_s = time.monotonic() - killed
        led.start()
        for proc in procs:
            proc.join(900)
        codes = [proc.exitcode for proc in procs]
        work = [signed(s) for s in states]
        digests = {w["digest"] for ws in work for w in ws}
        stored = led.stored(digests)
        worked = [[w["round"] for w in ws] for ws in work]
        back = all(any(3 < rnd <= 5 for rnd in w) and w[-1:] == [rounds] for w in worked)
        clean = all(not unsent_rounds(s) and not lost_rounds(s) for s in states)
        return {
            "passed": codes == [0, 0] and held and stored == len(digests) and back and clean,
            "accepted": len(digests),
            "stored": stored,
            "settled_twice": 0,
            "checks": {"nodes_exit_0": codes == [0, 0], "round_3_journaled": held,
                       "attesting_within_2_rounds": back, "journals_empty": clean},
            "ledger_down_s": round(down_s, 1),
            "rounds_worked": worked,
        }  # fmt: skip
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
        led.stop()
        del store


def _settled(rig: Rig, run: str, rounds: int, timeout_s: float) -> bool:
    return wait_for(lambda: rig.last_committed(run) >= rounds, timeout_s)


def kill9(rig: Rig) -> dict[str, Any]:
    rounds = 10 if rig.quick else 60
    led = rig.ledger("kill9")
    try:
        start = rig.anvil.block_number()
        run = rig.open_run(led, "kill9")
        leases = LeaseCheck.open(rig, led, run, rounds)
        rig.join(led, run, range(1, rounds + 1))
        load = rig.load(led.url, rig.attestations(run, range(1, rounds + 1)), threads=8)
        thread = load.background()
        wait_for(lambda: len(load.accepted) >= rounds * NODES // 3, 60, 0.05)
        before = len(load.accepted)
        led.kill9()
        led.start()
        thread.join()
        settled = _settled(rig, run, rounds, 60 if rig.quick else 180)
        paid = leases.verify()
        lease_checks = paid.pop("checks")
        return _outcome(
            load,
            led,
            rig.commits_per_round(run, start),
            accepted_before_kill=before,
            **paid,
            checks={"all_rounds_committed": settled, **lease_checks},
        )
    finally:
        led.stop()


def _pg_restart(rig: Rig) -> None:
    """`pg_ctl restart` (fast shutdown): the server's output to its log, never to our pipes,
    which the new postmaster would hold open."""
    from bench.harness.postgres import as_postgres, pg_bin

    datadir = rig.pg.datadir
    argv = [pg_bin("pg_ctl"), "-D", str(datadir), "-l", str(datadir.parent / "server.log"),
            "-m", "fast", "-w", "-t", "60", "restart"]  # fmt: skip
    subprocess.run(
        as_postgres(argv),
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
    )


def postgres_restart(rig: Rig) -> dict[str, Any]:
    rounds = 10 if rig.quick else 60
    led = rig.ledger("postgres", rig.postgres_url(f"faults_pg_{os.getpid()}"))
    try:
        start = rig.anvil.block_number()
        run = rig.open_run(led, "postgres")
        rig.join(led, run, range(1, rounds + 1))
        load = rig.load(led.url, rig.attestations(run, range(1, rounds + 1)), threads=8)
        thread = load.background()
        wait_for(lambda: len(load.accepted) >= rounds * NODES // 3, 60, 0.05)
        _pg_restart(rig)
        thread.join()
        settled = _settled(rig, run, rounds, 60 if rig.quick else 180)
        return _outcome(
            load,
            led,
            rig.commits_per_round(run, start),
            checks={"all_rounds_committed": settled},
        )
    finally:
        led.stop()


def rpc_outage(rig: Rig) -> dict[str, Any]:
    outage_s = 6.0 if rig.quick else 60.0
    half = 4 if rig.quick else 15
    proxy = SwitchableRpc(rig.anvil.rpc_url)
    led = rig.ledger("rpc", rpc_url=proxy.url)
    try:
        start = rig.anvil.block_number()
        run = rig.open_run(led, "rpc")
        leases = LeaseCheck.open(rig, led, run, 2 * half)
        rig.join(led, run, range(1, 2 * half + 1))
        first = rig.load(led.url, rig.attestations(run, range(1, half + 1)))
        first.run()
        _settled(rig, run, half, 60)
        time.sleep(1.5)  # the ledger's indexer (polling every 0.2 s) has seen those commits
        proxy.up = False
        cut_at = time.monotonic()
        second = rig.load(led.url, rig.attestations(run, range(half + 1, 2 * half + 1)))
        second.run()

        def closed() -> int:
            states = led.round_states(run)
            return sum(1 for r in range(half + 1, 2 * half + 1) if states.get(r, "open") != "open")

        # the outage lasts outage_s, longer (up to 5 x) until a round closed: on a loaded
        # machine the second load and the keeper's pass can take more than the 6 s of --quick
        time.sleep(max(0.0, outage_s - (time.monotonic() - cut_at)))
        while closed() == 0 and time.monotonic() - cut_at < 5 * outage_s:
            time.sleep(0.5)
        closed_in_outage = closed()
        committed_in_outage = rig.last_committed(run)
        outage_s = round(time.monotonic() - cut_at, 1)
        proxy.up = True
        settled = _settled(rig, run, 2 * half, 120 if rig.quick else 300)
        load = rig.load(led.url, first.work + second.work)
        load.accepted = first.accepted | second.accepted
        load.refused = first.refused + second.refused
        load.failures = first.failures + second.failures
        load.refused_digests = first.refused_digests | second.refused_digests
        paid = leases.verify()
        lease_checks = paid.pop("checks")
        return _outcome(
            load,
            led,
            rig.commits_per_round(run, start),
            outage_s=outage_s,
            rpc_requests_refused=proxy.refused,
            rounds_closed_during_outage=closed_in_outage,
            last_committed_during_outage=committed_in_outage,
            **paid,
            checks={
                **lease_checks,
                # under signed membership a round starts only once its predecessor is
                # committed: during an outage the next round can close, later ones wait
                "rounds_closed_during_outage": closed_in_outage >= 1,
                "settlement_resumed": settled,
            },
        )
    finally:
        led.stop()
        proxy.close()


def reorg(rig: Rig) -> dict[str, Any]:
    rounds = 8 if rig.quick else 30
    depth = 3
    led = rig.ledger("reorg", confirmations=str(depth + 1))
    try:
        with rig.mine_in_background():
            start = rig.anvil.block_number()
            run = rig.open_run(led, "reorg")
            leases = LeaseCheck.open(rig, led, run, rounds)
            rig.join(led, run, range(1, rounds + 1))
            load = rig.load(
                led.url, rig.attestations(run, range(1, rounds + 1)), threads=4, rate=40
            )
            thread = load.background()
            dropped = 0
            for _ in range(20):  # reorg right after a commit lands, so the reorg drops it
                seen = rig.last_committed(run)
                if seen >= rounds or not wait_for(
                    lambda s=seen: rig.last_committed(run) > s, 30, 0.02
                ):
                    break
                landed = rig.last_committed(run)
                rig.anvil.call("anvil_reorg", [depth, []])
                dropped += max(0, landed - rig.last_committed(run))
                if dropped >= 2:
                    break
            thread.join()
            settled = _settled(rig, run, rounds, 120 if rig.quick else 300)
            final = wait_for(lambda: all(s == "final" for s in led.round_states(run).values()), 60)
        counts = rig.commits_per_round(run, start)
        paid = leases.verify()
        lease_checks = paid.pop("checks")
        return _outcome(
            load,
            led,
            counts,
            depth=depth,
            commits_dropped_by_reorg=dropped,
            **paid,
            checks={
                **lease_checks,
                "reorg_dropped_a_commit": dropped >= 1,
                "all_rounds_committed": settled,
                "all_rounds_final": final,
                "each_round_once_on_chain": all(counts.get(r) == 1 for r in range(1, rounds + 1)),
            },
        )
    finally:
        led.stop()


def _tiny_disk(path: Path) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def blob_disk_full(rig: Rig) -> dict[str, Any]:
    import torch

    from ledger.core.blobstore import BlobStore

    blob_dir = rig.work / "blob-disk"
    mounted = _tiny_disk(blob_dir)
    env = {"blob_dir": str(blob_dir)}
    if not mounted:  # no root: the ledger's free-space reserve leaves 2 MiB to fill
        stats = os.statvfs(rig.work)
        env["blob_min_free_bytes"] = str(stats.f_bavail * stats.f_frsize - (2 << 20))
    led = rig.ledger("blobs", **env)
    try:
        start = rig.anvil.block_number()
        run = rig.open_run(led, "blobs")
        rig.join(led, run, range(1, 4))
        load = rig.load(led.url, rig.attestations(run, range(1, 4)))
        thread = load.background()
        codes: list[int] = []
        full_error: dict[str, Any] = {}
        give_up = time.monotonic() + (120 if rig.quick else 600)  # a stalled ledger fails here
        with httpx.Client(timeout=30) as client:
            for i in range(40):
                if time.monotonic() > give_up:
                    full_error = {"code": "gave_up", "message": f"{i} uploads in the time given"}
                    break
                sd = {"w": torch.randn(1 << 17, generator=torch.Generator().manual_seed(i))}
                digest = "0x" + hash_state_dict(sd).hex()
                node = rig.nodes[i % len(rig.nodes)]
                headers = UploadSigner(node.key, rig.domain).headers(digest)
                r = client.put(
                    f"{led.url}/v1/blobs/{digest}", content=encode_blob(sd), headers=headers
                )
                codes.append(r.status_code)
                if r.status_code == 507:
                    full_error = r.json()["error"]
                    break
        thread.join()
        leftovers = [p.name for p in (blob_dir / "tmp").iterdir()]
        files = {p.name.removesuffix(".safetensors") for p in blob_dir.glob("*.safetensors")}
        store = BlobStore.__new__(BlobStore)  # only its file hashing: no start-up clean-up
        store.max_bytes = 1 << 30
        intact = all(store.hash_file(blob_dir / f"{f}.safetensors") == f for f in files)
        from sqlalchemy import create_engine, text

        engine = create_engine(led.db_url)
        with engine.connect() as conn:
            rows = {r[0] for r in conn.execute(text("SELECT hash FROM blob"))}
        engine.dispose()
        return _outcome(
            load,
            led,
            rig.commits_per_round(run, start),
            disk="tmpfs 4 MiB" if mounted else "free-space reserve (no root to mount a tmpfs)",
            uploads=len(codes),
            stored_blobs=len(files),
            error=full_error,
            checks={
                "full_disk_is_a_clear_507": full_error.get("code") == "blob_disk_full",
                "no_partial_files": not leftovers,
                "stored_blobs_intact": intact,
                "rows_match_files": rows == files,
                "earlier_uploads_stored": codes.count(201) >= 1,
            },
        )
    finally:
        led.stop()
        if mounted:
            subprocess.run(["umount", "-l", str(blob_dir)], check=False)


def soak(rig: Rig) -> dict[str, Any]:
    seconds = 10.0 if rig.quick else 600.0
    rate, batch = 1000.0, 50
    led = rig.ledger("soak", max_batch_items=str(batch))
    try:
        start = rig.anvil.block_number()
        run = rig.open_run(led, "soak")
        total = int(rate * seconds)
        load = Load(led.url, [], threads=4)
        rss: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(1.0):
                rss.append(led.rss_bytes())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        batches = _soak_batches(rig, run, total=total, size=batch)
        began = time.monotonic()
        _batches(load, batches, rate=rate, began=began)
        elapsed = time.monotonic() - began
        stop.set()
        sampler.join()
        achieved = len(load.accepted) / elapsed
        warm = rss[len(rss) // 5 :] or rss
        early = sum(warm[: max(1, len(warm) // 4)]) / max(1, len(warm[: max(1, len(warm) // 4)]))
        late = sum(warm[-max(1, len(warm) // 4) :]) / max(1, len(warm[-max(1, len(warm) // 4) :]))
        growth = late - early
        return _outcome(
            load,
            led,
            rig.commits_per_round(run, start),
            seconds=round(elapsed, 1),
            target_per_s=rate,
            achieved_per_s=round(achieved, 1),
            rss_early_mb=round(early / 2**20, 1),
            rss_late_mb=round(late / 2**20, 1),
            checks={
                "rate_held": achieved >= 0.9 * rate,
                "rss_flat": growth <= max(32 << 20, 0.1 * early),
            },
        )
    finally:
        led.stop()


def _soak_batches(rig: Rig, run: str, *, total: int, size: int) -> list[list[Work]]:
    """``total`` distinct attestations (round by round, every node), signed before the clock
    starts and cut into batches of ``size``: the load generator, not the ledger, was the limit
    when each batch was signed on the fly (a torch pseudo-gradient and a signature per item in
    the bench's threads). The soak scores no blob, so its pseudo-gradients are plain hashes."""
    from bench.harness.nodes import attestation
    from protocol.signing import sign_attestation

    items: list[Work] = []
    rnd = 0
    while len(items) < total:
        rnd += 1
        base = genesis_of(run) if rnd == 1 else result_of(run, rnd - 1)
        for node in rig.nodes[: total - len(items)]:
            att = attestation(node, run_id=run, round_=rnd, base=base, result=result_of(run, rnd))
            sig = sign_attestation(att, rig.domain, node.key)
            payload = {"attestation": att.to_json(), "signature": "0x" + sig.hex()}
            items.append(Work("0x" + att.digest(rig.domain).hex(), orjson.dumps(payload)))
    return [items[i : i + size] for i in range(0, len(items), size)]


def _batches(load: Load, batches: list[list[Work]], *, rate: float, began: float) -> None:
    """Post ``batches`` at ``rate`` items/s from four threads (open loop: each batch is due at
    its scheduled time; a late batch is sent at once)."""
    per_thread = 4
    size = len(batches[0]) if batches else 1

    def worker(offset: int) -> None:
        with httpx.Client(base_url=load.url, timeout=30) as client:
            for index in range(offset, len(batches), per_thread):
                items = batches[index]
                due = began + index * size / rate
                if (delay := due - time.monotonic()) > 0:
                    time.sleep(delay)
                body = b'{"items":[' + b",".join(w.body for w in items) + b"]}"
                try:
                    r = client.post("/v1/attestations/batch", content=body,
                                    headers={"content-type": "application/json"})  # fmt: skip
                except httpx.HTTPError:
                    load.failures += 1
                    load.refused_digests.update(w.digest for w in items)
                    continue
                if r.status_code != 202:
                    load.refused.append(f"{r.status_code}")
                    load.refused_digests.update(w.digest for w in items)
                    continue
                for res in r.json()["results"]:
                    if res["status"] == "accepted":
                        load.accepted.add(items[res["index"]].digest)
                    else:
                        load.refused.append(res["error"]["code"])
                        load.refused_digests.add(items[res["index"]].digest)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(per_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


SCENARIOS: dict[str, Callable[[Rig], dict[str, Any]]] = {
    "kill9": kill9,
    "postgres_restart": postgres_restart,
    "rpc_outage": rpc_outage,
    "reorg": reorg,
    "blob_disk_full": blob_disk_full,
    "soak": soak,
    "ledger_outage": ledger_outage,
}


def _log_tails(work: Path, *, since: float, chars: int = 3000) -> dict[str, str]:
    """The end of every ledger log written since `since` (monotonic), by scenario folder."""
    cutoff = time.time() - (time.monotonic() - since)
    return {
        str(p.relative_to(work)): p.read_text(errors="replace")[-chars:]
        for p in sorted(work.glob("*/ledger.log"))
        if p.stat().st_mtime >= cutoff
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="seconds per scenario (CI)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS), help="run only these")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks clean up
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    anvil = AnvilProcess.start(work / "anvil")
    rig = None
    results: dict[str, Any] = {}
    try:
        dep_path = work / "deployment.json"
        dep = deploy(
            anvil.rpc_url, anvil.accounts[0][1], committer=anvil.accounts[1][0], out_path=dep_path
        )
        nodes = [new_node(anvil.w3, dep, anvil.accounts[2 + i % 8][0]) for i in range(NODES)]
        rig = Rig(work, anvil, dep, dep_path, nodes, domain_of(dep), args.quick)
        for name in args.only or list(SCENARIOS):
            log.info("scenario %s", name)
            t0 = time.monotonic()
            try:
                results[name] = SCENARIOS[name](rig)
            except Exception as exc:  # a scenario that cannot finish has failed
                log.exception("scenario %s failed", name)
                error = f"{type(exc).__name__}: {exc}"
                results[name] = {
                    "passed": False, "accepted": 0, "stored": 0, "settled_twice": 0, "error": error
                }  # fmt: skip
            results[name]["elapsed_s"] = round(time.monotonic() - t0, 1)
            if not results[name]["passed"]:  # the ledger's own account of what went wrong
                results[name]["log_tail"] = _log_tails(work, since=t0)
            log.info("scenario %s: %s", name, results[name])
    finally:
        anvil.stop()
        if rig is not None and rig.pg is not None:
            rig.pg.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    summary = {
        "scenarios": len(results),
        "passed": sum(1 for r in results.values() if r["passed"]),
        "lost": sum(r["accepted"] - r["stored"] for r in results.values()),
        "double_settlements": sum(r["settled_twice"] for r in results.values()),
        "quick": args.quick,
        "elapsed_s": round(time.monotonic() - began, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "results": results,
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
