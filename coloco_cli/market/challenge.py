"""`coloco market challenge`: prove a claimed device kind and count, memory and throughput to
the ledger with the timed hardware challenge (reference/challenge.py, docs/market.md).

The node signs its claim, gets a seed and one nonce per device, computes every device's product
at once (CPU: torch on all cores, the devices sharing them; CUDA: device d is ``cuda:d``, fp32
with TF32 off), commits each Merkle root before the deadline, then opens what the probe asks.
``--measure`` first runs the challenge locally at the claimed memory and claims what it measured.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import typer

from protocol import challenge_auth
from protocol.eip712 import Eip712Domain, wallet_int
from protocol.signing import address_of_private_key
from reference import challenge as ch

log = logging.getLogger(__name__)

Post = Callable[[str, dict[str, Any]], tuple[int, Any]]
"""POST ``path`` with a JSON body to the ledger: (status, JSON answer)."""


class ChallengeRefused(RuntimeError):
    """The ledger refused a step (the message carries its error)."""


def _ok(status: int, body: Any, what: str) -> Any:
    if status >= 400:
        err = body.get("error", {}) if isinstance(body, dict) else {}
        raise ChallengeRefused(f"{what}: HTTP {status} {err.get('code')}: {err.get('message')}")
    return body


def run_challenge(
    post: Post,
    key: bytes,
    domain: Eip712Domain,
    *,
    kind: str,
    devices: int,
    memory_bytes: int,
    flops: int,
    device: str = "cpu",
    threads: int | None = None,
) -> Any:
    """Ask for, compute, commit and open one challenge; the ledger's record of it."""
    node = address_of_private_key(key)
    request, expires = os.urandom(32), int(time.time()) + 300
    digest = challenge_auth.claim_digest(
        kind=kind,
        devices=devices,
        memory_bytes=memory_bytes,
        flops=flops,
        request=request,
        expires=expires,
    )
    body = {
        "node": node,
        "kind": kind,
        "devices": devices,
        "memoryBytes": wallet_int(memory_bytes),  # above 2^53 - 1 as a decimal string
        "flops": wallet_int(flops),
        "request": "0x" + request.hex(),
        "expires": expires,
        "signature": challenge_auth.sign(key, domain, node, "issue", 0, 0, digest),
    }
    issued = _ok(*post("/v1/market/challenges", body), "challenge request")
    cid, shape = int(issued["id"]), ch.Shape(int(issued["n"]), int(issued["m"]))
    seed = bytes.fromhex(issued["seed"][2:])
    log.info(
        "challenge %d: %d device(s) of %dx%d, deadline %.2f s",
        cid,
        devices,
        shape.n,
        shape.m,
        issued["deadline_s"],
    )

    def one(d: int) -> Any:
        dev = f"cuda:{d}" if device == "cuda" else device
        prover = ch.Prover(seed, bytes.fromhex(issued["nonces"][d][2:]), shape, dev)
        root = prover.run(hash_threads=threads or os.cpu_count() or 1)
        sig = challenge_auth.sign(key, domain, node, "commit", cid, d, root)
        path = f"/v1/market/challenges/{cid}"
        got = _ok(
            *post(f"{path}/commit", {"device": d, "root": "0x" + root.hex(), "signature": sig}),
            f"device {d} commitment",
        )
        opening = prover.open(bytes.fromhex(got["probe"][2:]))
        sig = challenge_auth.sign(key, domain, node, "open", cid, d, opening.digest())
        body = {"device": d, "opening": opening.to_json(), "signature": sig}
        return _ok(*post(f"{path}/open", body), f"device {d} opening")

    with ThreadPoolExecutor(devices) as pool:
        results = list(pool.map(one, range(devices)))
    decided = [r for r in results if r["verdict"] != "open"]
    return decided[-1] if decided else results[-1]


def _parse_bytes(text: str) -> int:
    units = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}
    t = text.strip().upper()
    num = t.rstrip("KMGTIB")
    unit = t[len(num) :]
    if unit not in units or not num.replace(".", "", 1).isdigit():
        raise typer.BadParameter(f"{text!r}: a size such as 512MiB, 16GiB or 1073741824")
    return int(float(num) * units[unit])


def challenge(
    *,
    memory: Annotated[str, typer.Option(help="Claimed memory per device, e.g. 16GiB.")],
    flops: Annotated[
        float, typer.Option(help="Claimed challenge FLOP/s per device (0 with --measure).")
    ] = 0.0,
    devices: Annotated[int, typer.Option(help="Claimed device count (one nonce each).")] = 1,
    device: Annotated[str, typer.Option(help="cpu (torch, all cores) or cuda.")] = "cpu",
    measure: Annotated[
        bool, typer.Option(help="Run the challenge locally first and claim what it measured.")
    ] = False,
    ledger_url: Annotated[str | None, typer.Option(envvar="COLOCO_LEDGER_URL")] = None,
    node_key: Annotated[
        str | None, typer.Option(envvar="COLOCO_NODE_KEY", help="The node's hot key (0x hex).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the ledger's record as JSON.")
    ] = False,
) -> None:
    """Prove a hardware claim with the ledger's timed challenge (its verdict and measured values
    are what an offer carries)."""
    import httpx

    from coloco_cli.common import emit_json, resolve
    from protocol.eip712 import Eip712Domain

    if device not in ch.INNER:
        raise typer.BadParameter(f"--device {device!r}: cpu or cuda")
    memory_bytes = _parse_bytes(memory)
    shape = ch.size(memory_bytes, device)
    if measure:
        flops = ch.measure(shape, "cuda:0" if device == "cuda" else "cpu")
    if flops <= 0:
        raise typer.BadParameter("--flops: claim a positive FLOP/s, or pass --measure")
    if not node_key:
        raise typer.BadParameter("--node-key (or COLOCO_NODE_KEY): the node's hot key, 0x hex")
    base = resolve(ledger_url=ledger_url).ledger_url
    with httpx.Client(base_url=base, timeout=600) as client:
        domain = Eip712Domain.from_json(client.get("/v1/eip712").json()["domain"])

        def post(path: str, body: dict[str, Any]) -> tuple[int, Any]:
            resp = client.post(path, json=body)
            return resp.status_code, resp.json()

        try:
            record = run_challenge(
                post,
                bytes.fromhex(node_key.removeprefix("0x")),
                domain,
                kind=device,
                devices=devices,
                memory_bytes=memory_bytes,
                flops=int(flops),
                device=device,
            )
        except ChallengeRefused as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
    if as_json:
        emit_json(record)
    else:
        typer.echo(
            f"challenge {record['challenge']}: {record['verdict']}"
            + (f" ({record['reason']})" if record["reason"] else "")
            + f"; measured {record['measured']['flops']} FLOP/s, "
            f"{record['measured']['memory_bytes']} bytes per device, "
            f"{record['measured']['devices']} device(s)"
        )
    if record["verdict"] != "passed":
        raise typer.Exit(1)
