"""`python -m bench.cli [--runs N]`: how long `coloco` takes to start and answer.

Starts a real anvil, deploys the contracts and starts `coloco ledger serve` (SQLite), then times,
each as a new process, N times (default 5, after one untimed warm-up) and reports the medians:

- ``python_s``: `python -c pass` (the interpreter alone: the floor on this machine, at this load);
- ``version_s``: `coloco --version`;
- ``rewards_show_s``: `coloco rewards show ADDRESS --json` against that ledger and chain, the full
  command: the ledger's answer for a payout address over HTTP, then two contract views on chain
  (`RewardDistributor.claimed`, `ModelShareToken.balanceOf`). The address is anvil's account 2,
  which the fresh ledger answers for with nothing owed: the same requests and decoding as for an
  address with receipts, without a training run first.

Each figure is the median wall time; ``*_cpu_s`` beside it is the median CPU time (user +
system) of the same runs, what the wall would be on an idle machine (on a shared one the wall
grows with the load: ``load_avg_1m`` says how loaded it was). `coloco` is the console script
beside this interpreter (else `python -m coloco_cli`). Targets (issue 28): ``version_s`` <= 0.5,
``rewards_show_s`` <= 1.5. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from protocol.deploy import deploy
from protocol.devnet import AnvilProcess, free_port, stop_pid

log = logging.getLogger("bench.cli")
ADMIN = "bench-cli-admin-token-0123456789abcdef"


def coloco_argv() -> list[str]:
    script = Path(sys.executable).parent / "coloco"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "coloco_cli"]


def timed(argv: list[str], env: dict[str, str], runs: int) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds (user + system) of `argv` run `runs` times
    (after one untimed warm-up); each must exit 0. The CPU figure is what the wall would be on
    an idle machine; on a shared one the wall grows with the load."""
    walls, cpus = [], []
    for i in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        took = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr[-1500:]}")
        if i:
            walls.append(took)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return round(statistics.median(walls), 3), round(statistics.median(cpus), 3)


def start_ledger(anvil: AnvilProcess, deployment: Path, work: Path) -> tuple[int, str]:
    port = free_port()
    env = {
        **os.environ,
        "COLOCO_LEDGER_ENVIRONMENT": "development",
        "COLOCO_LEDGER_RPC_URL": anvil.rpc_url,
        "COLOCO_LEDGER_DEPLOYMENT": str(deployment),
        "COLOCO_LEDGER_COMMITTER_PRIVATE_KEY": anvil.accounts[1][1],
        "COLOCO_LEDGER_DATABASE_URL": f"sqlite:///{work / 'ledger.db'}",
        "COLOCO_LEDGER_BLOB_DIR": str(work / "blobs"),
        "COLOCO_LEDGER_ADMIN_TOKEN": ADMIN,
    }
    logfile = work / "ledger.log"
    with logfile.open("ab") as out:
        proc = subprocess.Popen(
            [*coloco_argv(), "ledger", "serve", "--port", str(port), "--log-level", "warning"],
            env=env, cwd=work, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ledger exited {proc.returncode}: {logfile.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                return proc.pid, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop_pid(proc.pid)
    raise RuntimeError(f"ledger did not answer: {logfile.read_text()[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each (median)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLOCO_")}
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        work = Path(tmp)
        anvil = AnvilProcess.start(work / "anvil")
        ledger_pid = None
        try:
            dep = work / "deployment.json"
            deploy(anvil.rpc_url, anvil.accounts[0][1], committer=anvil.accounts[1][0],
                   out_path=dep)  # fmt: skip
            ledger_pid, url = start_ledger(anvil, dep, work)
            log.info(
                "ledger at %s, chain at %s: timing %d runs each", url, anvil.rpc_url, args.runs
            )
            coloco = coloco_argv()
            show = [*coloco, "rewards", "show", anvil.accounts[2][0], "--json", "--rpc-url",
                    anvil.rpc_url, "--ledger-url", url, "--deployment", str(dep)]  # fmt: skip
            shown = subprocess.run(show, env=env, capture_output=True, text=True, check=True)
            answer = json.loads(shown.stdout.strip().splitlines()[-1])
            assert answer["account"] == anvil.accounts[2][0], answer
            python_s, python_cpu_s = timed([sys.executable, "-c", "pass"], env, args.runs)
            version_s, version_cpu_s = timed([*coloco, "--version"], env, args.runs)
            rewards_show_s, rewards_show_cpu_s = timed(show, env, args.runs)
            result = {
                "python_s": python_s,
                "version_s": version_s,
                "rewards_show_s": rewards_show_s,
                "python_cpu_s": python_cpu_s,
                "version_cpu_s": version_cpu_s,
                "rewards_show_cpu_s": rewards_show_cpu_s,
                "runs": args.runs,
                "load_avg_1m": round(os.getloadavg()[0], 2),
                "cores": os.cpu_count(),
            }
        finally:
            if ledger_pid is not None:
                stop_pid(ledger_pid)
            anvil.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
