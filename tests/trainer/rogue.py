"""A rogue process that reaches the rendezvous store and attacks the run's coordination.

`start_rogue(attack, port, info)` spawns a process named ``rogue-<attack>``: a plain TCPStore
client (anyone who can reach the port can be one) with its own key, which is *not* registered on
chain. It writes what the attack needs, over and over, until the test ends it. The attacks are
the ones an unauthenticated store used to allow (issue 16): rewrite the round's config, add a
phantom member, drop an honest one, move ``current_round``, serve a poisoned checkpoint with a
matching unsigned hash, replay an old signed join, host the rendezvous and vanish mid-run, and
keep a stalled node looking alive with replayed or forged heartbeats, and (with a registered key)
join every round at the ledger but never at the rendezvous while heartbeating (a sybil).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import forked
from reference.settings import TrainingSettings

ROGUE_KEY = "0x" + "66" * 32  # never registered on chain


@dataclass
class RogueInfo:
    run_id: bytes
    chain_id: int
    ledger: str  # ContributionLedger address: the coordination domain
    honest: list[str] = field(default_factory=list)
    target: str = ""  # the honest node an attack is aimed at
    absent: str = ""  # a registered node that is not running
    rounds: int = 4
    die_after: str = "members/2/0/open"  # the "host" attack vanishes once this key exists
    die_delay_s: float = 0.5
    private_key: str = ""  # the rogue's key when it is a registered node (else ROGUE_KEY)
    ledger_url: str = ""  # the "sybil" attack joins every round there


def _store(port: int, *, host: bool = False) -> Any:
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", port, is_master=host, wait_for_workers=False, timeout=timedelta(seconds=60)
    )


class _Rogue:
    def __init__(self, port: int, info: RogueInfo) -> None:
        import torch.distributed as dist

        from protocol.eip712 import Eip712Domain
        from protocol.keys import NodeKey
        from trainer.network.coordination.store import run_namespace

        # the run's own keys (a rogue that writes outside the run's namespace reaches no one)
        # (PrefixStore joins its prefix and a key with "/": the namespace without its own)
        namespace = run_namespace(info.run_id).removesuffix("/")
        self.store = dist.PrefixStore(namespace, _store(port))  # type: ignore[attr-defined]
        self.info = info
        self.key = NodeKey.from_private_key(bytes.fromhex((info.private_key or ROGUE_KEY)[2:]))
        self.domain = Eip712Domain(chain_id=info.chain_id, verifying_contract=info.ledger)  # type: ignore[arg-type]
        self.done: set[Any] = set()

    def forged(self, kind: int, r: int, a: int, payload: dict[str, Any], node: str = "") -> bytes:
        """Signed by the rogue's key; claiming ``node`` as signer when given (a forgery)."""
        from protocol.coordination import Kind, SignedMessage

        msg = SignedMessage.create(self.key.private_key, node or self.key.address, self.domain,  # type: ignore[arg-type]
                                   run_id=self.info.run_id, round=r, attempt=a, kind=Kind(kind),
                                   payload=payload)  # fmt: skip
        return msg.to_wire()

    def slot(self, r: int, a: int, value: bytes) -> None:
        n = int(self.store.add(f"members/{r}/{a}/n", 1)) - 1
        self.store.set(f"members/{r}/{a}/slot/{n}", value)

    def once(self, tag: Any) -> bool:
        if tag in self.done:
            return False
        self.done.add(tag)
        return True

    def signed_in(self, key: str) -> Any:
        from protocol.coordination import SignedMessage
        from protocol.errors import ProtocolError

        if not self.store.check([key]):
            return None
        try:
            return SignedMessage.from_wire(self.store.get(key))
        except ProtocolError:
            return None

    # --- attacks ----------------------------------------------------------------------------

    def config(self) -> None:
        """Rewrite the round's config: the old shared key, forged read-outs, a round-open that
        pins an old config block."""
        evil = {"version": 99, "inner_steps": 1, "inner_lr": 0.5, "batch_size": 4,
                "outer_lr": 5.0, "outer_momentum": 0.0, "wire_format": "fp32",
                "mixture": [10000]}  # fmt: skip
        for r in range(1, self.info.rounds + 1):
            for a in (0, 1):
                self.store.set(f"config/{r}/{a}", json.dumps(evil))
                for addr in self.info.honest:
                    if self.once(("cfg", r, a, addr)):
                        self.store.set(f"config/{r}/{a}/{addr}",
                                       self.forged(4, r, a, {"hash": "00" * 32, "version": 99},
                                                   node=addr))  # fmt: skip
            claimed = self.info.honest[0] if r % 2 == 0 else ""  # even rounds: a forgery
            old_block = self.forged(2, r, 0, {"joins": [], "config_block": 1}, node=claimed)
            self.store.compare_set(f"members/{r}/0/open", "", old_block)

    def phantom(self) -> None:
        """Add phantom members: an unsigned join, a join signed by an unregistered key, and a
        join claiming a registered node that is not running (signed by the rogue)."""
        for r in range(1, self.info.rounds + 1):
            if not self.once(("phantom", r)):
                continue
            self.slot(r, 0, json.dumps({"node": self.key.address}).encode())
            self.slot(r, 0, self.forged(1, r, 0, {"head": 0, "endpoint": ""}))
            self.slot(r, 0, self.forged(1, r, 0, {"head": 0, "endpoint": ""},
                                        node=self.info.absent))  # fmt: skip
            legacy = {"round": r, "members": [self.info.absent]}
            self.store.set("latest_members", json.dumps(legacy))

    def drop(self) -> None:
        """Drop an honest member: forged leave notices, its join slots overwritten, a round-open
        without it."""
        target = self.info.target
        for r in range(1, self.info.rounds + 1):
            self.store.set(f"leave/{r}/{target}",
                           self.forged(3, r, 0, {}, node=target if r % 2 else ""))  # fmt: skip
            prefix = f"members/{r}/0"
            n = int(self.store.add(f"{prefix}/n", 0))
            others = []
            for i in range(n):
                msg = self.signed_in(f"{prefix}/slot/{i}")
                if msg is None:
                    continue
                if msg.message.node == target and self.once(("drop", r, i)):
                    self.store.set(f"{prefix}/slot/{i}", b"dropped by the rogue")
                elif msg.message.node != target:
                    others.append(msg.to_wire().decode())
            if others:
                self.store.compare_set(f"{prefix}/open", "",
                                       self.forged(2, r, 0, {"joins": others,
                                                             "config_block": 0}))  # fmt: skip

    def move_round(self) -> None:
        """Move current_round far ahead (plain and signed by the rogue), and ckpt/latest."""
        self.store.set("current_round", "99")
        self.store.set("current_round", self.forged(2, 50, 0, {"joins": [], "config_block": 0}))
        self.store.set("ckpt/latest", json.dumps({"round": 50, "hash": "00" * 32}))

    def poison(self) -> None:
        """Offer a poisoned checkpoint of every opened round: the blob under the store key
        members used to serve it from, and ``ckpt/latest`` pointing at it (plain JSON with its
        matching hash, and a CHECKPOINT offer signed by the rogue's unregistered key)."""
        import torch

        from reference.checkpoint import RoundCheckpoint
        from reference.model import GPTConfig, genesis_state
        from trainer.network.peer_checkpoint import Manifest

        target = self.info.target
        for r in range(1, self.info.rounds + 1):
            if not self.store.check([f"members/{r}/0/open"]):
                continue
            weights = genesis_state(GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32), 99)
            bad = RoundCheckpoint(r, weights, {n: torch.zeros_like(t) for n, t in weights.items()},
                                  self.info.run_id)  # fmt: skip
            blob = bad.to_bytes()
            if self.once(("poison", r)):
                self.store.set(f"ckpt/{r}/{target}", blob)
            offer = Manifest.of(blob, bad.weights_hash)[0].body() | {"serve": "127.0.0.1:9"}
            self.store.set("ckpt/latest", json.dumps({"round": r, "hash": bad.weights_hash.hex()}))
            self.store.set("ckpt/latest", self.forged(5, r, 0, offer))

    def replay(self) -> None:
        """Replay the round-1 signed join of a node that left into every later round."""
        target = self.info.target
        found = None
        n = int(self.store.add("members/1/0/n", 0))
        for i in range(n):
            msg = self.signed_in(f"members/1/0/slot/{i}")
            if msg is not None and msg.message.node == target:
                found = msg.to_wire()
        if found is None:
            return
        for r in range(2, self.info.rounds + 1):
            if self.once(("replay", r)):
                self.slot(r, 0, found)
                self.slot(r, 1, found)

    def outsider(self) -> None:
        """A registered, staked node that never joined a round at the ledger: it posts its own
        join and closes every round itself, with the honest joins and its own (every signature
        valid, the closer a member of its list), so that it would sit in the all-reduce while
        the ledger's outer step leaves it out."""
        from protocol.coordination import Kind

        for r in range(1, self.info.rounds + 1):
            prefix = f"members/{r}/0"
            if self.store.check([f"{prefix}/open"]):
                continue
            mine = self.forged(1, r, 0, {"head": 0, "endpoint": ""})
            if self.once(("outsider", r)):
                self.slot(r, 0, mine)
            joins, heads, seen = [mine.decode()], [0], set()
            for i in range(int(self.store.add(f"{prefix}/n", 0))):
                msg = self.signed_in(f"{prefix}/slot/{i}")
                if (msg is not None and msg.message.kind == Kind.JOIN
                        and msg.message.node in set(self.info.honest) - seen):  # fmt: skip
                    seen.add(msg.message.node)
                    joins.append(msg.to_wire().decode())
                    heads.append(int(msg.body().get("head", 0)))
            if len(joins) > 1:
                opening = self.forged(2, r, 0, {"joins": joins, "config_block": max(heads)})
                self.store.compare_set(f"{prefix}/open", "", opening)

    def heartbeat(self) -> None:
        """Keep a stalled node looking alive in round 2: replay its newest signed heartbeat, and
        post newer ones claiming it (signed by the rogue) or signed as the rogue, in turn."""
        if not self.store.check(["members/2/0/open"]) or self.store.check(["members/3/0/open"]):
            return
        key = f"hb/{self.info.target}"
        msg = self.signed_in(key)
        if msg is not None and msg.message.node == self.info.target:
            seq = int(msg.body().get("seq", 0))
            if seq > getattr(self, "best", (0, b""))[0]:
                self.best = (seq, msg.to_wire())
        self.turn = getattr(self, "turn", 0) + 1
        seq = 10**9 + self.turn
        values = [self.forged(6, 2, 0, {"seq": seq}, node=self.info.target),
                  self.forged(6, 2, 0, {"seq": seq})]  # fmt: skip
        if hasattr(self, "best"):
            values.append(self.best[1])
        self.store.set(key, values[self.turn % len(values)])

    def sybil(self) -> None:
        """A registered node that joins every round at the ledger once an honest node did,
        never at the rendezvous, and keeps its heartbeat going, so that it looks alive to the
        members waiting for it."""
        import httpx

        from protocol.join import RoundJoin
        from protocol.types import RoundNumber, RunId

        for r in range(1, self.info.rounds + 1):
            if ("sybil", r) in self.done:
                continue
            seen = httpx.get(f"{self.info.ledger_url}/v1/runs/0x{self.info.run_id.hex()}/rounds/"
                             f"{r}/members", timeout=5).json()  # fmt: skip
            if not seen.get("members"):
                continue  # joins right after an honest node (the round's window is theirs)
            j = RoundJoin(RunId(self.info.run_id), RoundNumber(r), self.key.address)
            sig = self.key.sign_digest(j.digest(self.domain))
            signed = {"join": j.to_json(), "signature": "0x" + sig.hex()}
            resp = httpx.post(f"{self.info.ledger_url}/v1/joins", json=signed, timeout=5)
            if resp.status_code == 202:
                self.done.add(("sybil", r))
        self.seq = getattr(self, "seq", 0) + 1
        self.store.set(f"hb/{self.key.address}",
                       self.forged(6, 0, 0, {"seq": self.seq, "session": "sybil"}))  # fmt: skip


def _rogue_main(attack: str, port: int, info: RogueInfo) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if attack == "host":
        _rogue_host(port, info)
        return
    rogue = _Rogue(port, info)
    step = getattr(rogue, attack)
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # a rogue keeps going whatever the store answers
            step()
        time.sleep(0.1)


def _rogue_host(port: int, info: RogueInfo) -> None:
    """Host the run's rendezvous, then vanish (no goodbye) ``die_delay_s`` after ``die_after``
    appears (by default once round 2 has opened: round 2 is in flight)."""
    from trainer.network.coordination.store import run_namespace

    store = _store(port, host=True)
    store.set("rendezvous/ready", "1")
    while not store.check([run_namespace(info.run_id) + info.die_after]):
        time.sleep(0.01)
    time.sleep(info.die_delay_s)
    os._exit(9)


def start_rogue(attack: str, port: int, info: RogueInfo) -> Any:
    proc = forked.process(_rogue_main, (attack, port, info), name=f"rogue-{attack}")
    proc.start()
    return proc


def stop_rogue(proc: Any) -> None:
    if proc.is_alive():
        proc.kill()
    proc.join(10)


# --- the honest side: registered, staked nodes on the real anvil ----------------------------


@dataclass
class OnChain:
    """Four registered, staked node keys and the deployment, for node processes to use."""

    rpc_url: str
    deployment: str
    keys: list[str]
    addresses: list[str]
    chain_id: int
    ledger: str
    version: int
    inner_steps: int

    def plan(self, i: int, **kw: Any) -> Any:
        from tests.trainer.nodes import Plan

        return Plan(key=i, private_key=self.keys[i], rpc_url=self.rpc_url,
                    deployment=self.deployment, **kw)  # fmt: skip

    def info(self, **kw: Any) -> RogueInfo:
        from tests.trainer.nodes import RUN_ID

        return RogueInfo(run_id=RUN_ID, chain_id=self.chain_id, ledger=self.ledger, **kw)


def on_chain(
    chain: Any, deployment: Any, tmp_path: Any, *, data: Path, inner_steps: int = 3
) -> OnChain:
    """Four registered nodes on ``chain``; the run pins ``data`` (the nodes' corpus folder)."""
    from bench.harness.nodes import new_node
    from protocol.chain import ChainClient
    from reference.data import Corpus
    from tests.ledger.helpers import governance_sets

    path = tmp_path / "deployment.json"
    deployment.save(path)
    nodes = [new_node(chain.w3, deployment, chain.accounts[2 + i][0], seed=bytes([0x31 + i]) * 32)
             for i in range(4)]  # fmt: skip
    governance_sets(chain, deployment, "setInnerLoop", inner_steps, 3000)
    governance_sets(chain, deployment, "setDataRoot", Corpus.from_folder(data).root)
    view = TrainingSettings.read(ChainClient(chain.rpc_url, deployment))
    return OnChain(
        rpc_url=chain.rpc_url, deployment=str(path), keys=["0x" + n.key.hex() for n in nodes],
        addresses=[str(n.address) for n in nodes], chain_id=int(deployment.chain_id),
        ledger=str(deployment.address("ContributionLedger")), version=int(view.version),
        inner_steps=int(view.inner_steps),
    )  # fmt: skip


def by_round(results: dict[int, list[dict[str, Any]]]) -> dict[int, dict[int, dict[str, Any]]]:
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for key, records in results.items():
        for rec in records:
            out.setdefault(rec["round"], {})[key] = rec
    return out


def assert_agree(rounds: dict[int, dict[int, dict[str, Any]]]) -> None:
    """Every round: one result, one base; each round starts from the previous round's result."""
    for r, recs in rounds.items():
        results = {rec["result_checkpoint"] for rec in recs.values()}
        bases = {rec["base_checkpoint"] for rec in recs.values()}
        assert len(results) == 1 and len(bases) == 1, f"round {r}: {results} {bases}"
        if r - 1 in rounds:
            (prev,) = {rec["result_checkpoint"] for rec in rounds[r - 1].values()}
            assert bases == {prev}, f"round {r} did not start from round {r - 1}'s result"


def checks(refusals: list[tuple[str, str]], prefix: str) -> set[str]:
    """The checks that refused values under keys starting with ``prefix``."""
    return {check for check, key in refusals if key.startswith(prefix)}
