"""Red team: every cheating strategy of bench/redteam/cheats.py as a real node, against anvil, the
ledger and 4 honest nodes (each node its own process running trainer.round.node.NodeRunner).

Round 1 is honest; then each strategy gets a round, played by one of 3 cheating nodes (honest in
every other round; the sybil pair uses two of them); ``--quick`` and the full run both try every
strategy, the full run adds an honest round between attacks. A strategy is *caught* when its
cheater earned at most 1% of an honest node's reward in the rounds it touched, every honest node
of those rounds was paid, and each round was committed with the ledger's own checkpoint.

Prints one JSON object as its last line: strategies, caught, per_strategy {name: {caught,
round_caught, earnings_ratio, why}}, honest_penalised, honest_node_rounds,
max_cheater_earnings_ratio, audit_cpu_ratio (the ledger's replay CPU seconds over the nodes'
training CPU seconds, auditing ``--audit-fraction`` of node-rounds plus every suspicious one),
node_threads (torch threads each node trains on: torch's default, one a core; the ledger's
segment audit holds on any count), probe_cpu_s (the first-step probe of ledger.judge.steps: level
2, not in the ratio, like the usefulness scorer), load_average_1m. A cheater's earnings are its
``reward`` in the round views of the rounds its strategy touched (what enters the rewards tree; a
failed audit's is withheld), over the mean honest node's ``reward`` in those rounds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.redteam.cheats import NAMES
from bench.redteam.config import NetConfig
from bench.redteam.realnet import RealNet, run
from protocol.deploy import deploy
from protocol.devnet import AnvilProcess

log = logging.getLogger("bench.redteam")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.redteam", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="no honest rounds between attacks")
    parser.add_argument("--audit-fraction", type=float, default=0.1)
    parser.add_argument("--only", nargs="*", help="strategy names (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (node logs)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop anvil and the nodes too
    names = [n for n in NAMES if not args.only or n in args.only]
    work = Path(tempfile.mkdtemp(prefix="bench-redteam-"))
    anvil = AnvilProcess.start(work / "anvil")
    start = time.monotonic()
    try:
        dep_path = work / "deployment.json"
        dep = deploy(
            anvil.rpc_url, anvil.accounts[0][1], committer=anvil.accounts[1][0], out_path=dep_path
        )
        net = RealNet(anvil, dep, dep_path, work, NetConfig(audit_fraction=args.audit_fraction))
        with net.running():
            out = run(net, names, honest_between=0 if args.quick else 1)
    finally:
        anvil.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    out["wall_s"] = round(time.monotonic() - start, 1)
    out["load_average_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
