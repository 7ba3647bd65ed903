"""A joiner fetches a checkpoint peer to peer across rate-limited links, counted on the wire.

    python -m bench.network_ckpt [--preset cpu10m] [--rate-mbit 100] [--peers 2]

``--peers`` members, each in its own network namespace (bench/harness/netns.py), serve the same
round checkpoint (genesis weights + zero momentum of the preset: about 8 B per parameter) with the
real :class:`trainer.network.peer_checkpoint.CheckpointServer` while they keep running AdamW steps
in their main thread; a joiner in another namespace runs the real
:func:`trainer.network.peer_checkpoint. fetch` from all of them at once and checks the whole blob
against the weights hash. Bytes are the namespaces' ``eth0`` counters; beside them the model: the
blob and the digest list in 1448-byte TCP segments with 66 bytes of headers each, plus HTTP
request/response headers (what the joiner receives), and its requests plus one ACK per two segments
(what it sends: a rough figure, as the veth's receive offload coalesces segments and the kernel
acks fewer). Also used by bench.network and tests/trainer/test_peer_checkpoint_netns.py.
The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness.netns import Netns, unavailable

log = logging.getLogger("bench.network_ckpt")
REPO = Path(__file__).resolve().parents[1]
PORT = 5600
MSS = 1448
FRAME = 66
REQUEST = 130  # "GET /v1/ckpt/1/<root>/chunk/i HTTP/1.1", Host, Accept-Encoding
RESPONSE_HEADER = 160  # status line, Server, Date, Content-Length, Content-Type
PER_PEER = 2  # connections per peer (trainer.network.peer_checkpoint.fetch's default)
ROUND = 1

_MEMBER = """
import json, sys, threading, time, torch
from bench.network_ckpt import checkpoint_of
from trainer.network.peer_checkpoint import CheckpointServer, Manifest
torch.set_num_threads(1)
preset, ip, port, chunk, train = sys.argv[1:6]
port, chunk, train = int(port), int(chunk), train == "1"
ckpt, model = checkpoint_of(preset)
blob = ckpt.to_bytes()
manifest, digests = Manifest.of(blob, ckpt.weights_hash, chunk)
server = CheckpointServer(ip, port)
server.offer(1, blob, digests, manifest)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print(json.dumps(manifest.body()), flush=True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randint(0, 256, (4, model.cfg.seq_len + 1), generator=torch.Generator().manual_seed(0))
steps = []
while not stop.is_set():  # keep training while serving, until the bench closes our stdin
    if not train:
        time.sleep(0.05)
        continue
    s = time.perf_counter()
    _, loss = model(x[:, :-1], x[:, 1:]); opt.zero_grad(); loss.backward(); opt.step()
    steps.append(time.perf_counter() - s)
print(json.dumps({"served": server.bytes_served, "steps": len(steps),
                  "step_s": sum(steps) / max(1, len(steps))}), flush=True)
"""

_JOINER = """
import json, sys, time
from reference.checkpoint import RoundCheckpoint
from trainer.network.peer_checkpoint import Manifest, fetch
manifest = Manifest.from_body(json.loads(sys.argv[1]))
t = time.monotonic()
blob, faults = fetch(1, manifest, sys.argv[2].split(","))
fetch_s = time.monotonic() - t
ckpt = RoundCheckpoint.from_bytes(blob, expect_hash=manifest.weights_hash)
print(json.dumps({"fetch_s": fetch_s, "faults": len(faults), "round": ckpt.round}), flush=True)
"""


def checkpoint_of(preset: str) -> Any:
    """The round-1 checkpoint every member holds (genesis weights, zero momentum), and a model."""
    import torch

    from reference.checkpoint import RoundCheckpoint
    from reference.model import GPT, GPTConfig, genesis_state

    cfg = GPTConfig.preset(preset)
    weights = genesis_state(cfg, 0)
    momentum = {n: torch.zeros_like(t) for n, t in weights.items()}
    return RoundCheckpoint(ROUND, weights, momentum), GPT(cfg, seed=0)


def fetch_model_bytes(size: int, chunk: int, connections: int) -> dict[str, int]:
    """What the joiner should receive and send by the formula: each response's header segment
    and body in 1448-byte segments with 66 bytes of headers each; each request in one segment;
    one ACK per two segments received; three frames each way to open and close a connection."""
    n = -(-size // chunk)
    payloads = [32 * n] + [min(chunk, size - i * chunk) for i in range(n)]
    segments = sum(1 + math.ceil(p / MSS) for p in payloads)
    handshakes = 3 * FRAME * connections
    rx = sum(RESPONSE_HEADER + p for p in payloads) + (segments + len(payloads)) * FRAME
    tx = len(payloads) * (REQUEST + FRAME) + math.ceil(segments / 2) * FRAME
    return {"rx": rx + handshakes, "tx": tx + handshakes}


def run(
    preset: str = "cpu10m",
    rate_mbit: float = 100.0,
    peers: int = 2,
    *,
    chunk: int = 1 << 20,
    train: bool = True,
    timeout_s: float = 300.0,
) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    joiner = peers
    with Netns(peers + 1, rate_mbit, prefix=f"ck{os.getpid() % 100000}") as net:
        members = [
            subprocess.Popen(
                [
                    *net.argv(i),
                    sys.executable,
                    "-c",
                    _MEMBER,
                    preset,
                    net.ip_of(i),
                    str(PORT),
                    str(chunk),
                    "1" if train else "0",
                ],
                env=env,
                cwd=REPO,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(peers)
        ]
        try:
            bodies = {m.stdout.readline().strip() for m in members if m.stdout}
            if len(bodies) != 1:
                raise RuntimeError(f"members disagree on the manifest (or died): {bodies}")
            body = bodies.pop()
            before = [net.counters(i) for i in range(peers + 1)]
            endpoints = ",".join(f"{net.ip_of(i)}:{PORT}" for i in range(peers))
            done = subprocess.run(
                [*net.argv(joiner), sys.executable, "-c", _JOINER, body, endpoints],
                env=env,
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=True,
            )
            after = [net.counters(i) for i in range(peers + 1)]
            got = json.loads(done.stdout.strip().splitlines()[-1])
            served = [json.loads(m.communicate("", timeout=60)[0]) for m in members]
        finally:
            for m in members:
                if m.poll() is None:
                    m.kill()
                    m.wait()
    manifest = json.loads(body)
    size, n_chunks = manifest["size"], -(-manifest["size"] // manifest["chunk_bytes"])
    rx = after[joiner].rx_bytes - before[joiner].rx_bytes
    tx = after[joiner].tx_bytes - before[joiner].tx_bytes
    model = fetch_model_bytes(size, manifest["chunk_bytes"], 1 + PER_PEER * peers)
    return {
        "checkpoint_preset": preset,
        "checkpoint_peers": peers,
        "checkpoint_rate_mbit": rate_mbit,
        "checkpoint_blob_bytes": size,
        "checkpoint_chunks": n_chunks,
        "checkpoint_fetch_s": round(got["fetch_s"], 3),
        "checkpoint_fetch_mbit_s": round(8 * rx / got["fetch_s"] / 1e6, 1),
        "checkpoint_fetch_rx_bytes": rx,
        "checkpoint_fetch_rx_model_bytes": model["rx"],
        "checkpoint_fetch_tx_bytes": tx,
        "checkpoint_fetch_tx_model_bytes": model["tx"],
        "checkpoint_served_by_peer": [s["served"] for s in served],
        "checkpoint_peer_tx_bytes": [after[i].tx_bytes - before[i].tx_bytes for i in range(peers)],
        "checkpoint_peers_trained_steps": [s["steps"] for s in served],
        "checkpoint_peers_step_s": [round(s["step_s"], 3) for s in served],
        "checkpoint_faults": got["faults"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="cpu10m")
    p.add_argument("--rate-mbit", type=float, default=100.0)
    p.add_argument("--peers", type=int, default=2)
    p.add_argument("--no-train", action="store_true", help="members idle while they serve")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    reason = unavailable()
    if reason is not None:
        raise SystemExit(f"bench.network_ckpt needs network namespaces: {reason}")
    load = os.getloadavg()
    t0 = time.perf_counter()
    out = run(args.preset, args.rate_mbit, args.peers, train=not args.no_train)
    out |= {"load_avg_start": [round(x, 2) for x in load],
            "load_avg_end": [round(x, 2) for x in os.getloadavg()],
            "wall_s": round(time.perf_counter() - t0, 1)}  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main()
