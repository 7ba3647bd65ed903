"""No lost work through a ledger outage; a restarted or late node always rejoins.

Real node processes (gloo, the rendezvous on the test's TCPStore), a real anvil with the deployed
contracts and registered, staked node keys, and the real ledger as its own process (`coloco ledger
serve`, SQLite, its worker closing, scoring and committing rounds on chain), so it can be killed
with SIGKILL and restarted on the same database.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.fault_rig import LedgerProc
from bench.ledger import ADMIN
from protocol.attestation import ComputeAttestation
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.eip712 import Eip712Domain
from protocol.types import Address, RunId
from reference.model import GPTConfig
from tests.conftest import QUICK
from tests.trainer.nodes import RUN_ID, collect, start_nodes
from tests.trainer.rogue import OnChain, on_chain
from trainer.round.journal import lost_rounds, unsent_rounds
from trainer.round.recovery import genesis_hash

pytestmark = [pytest.mark.distributed, pytest.mark.anvil]

MODEL = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32)  # tests/trainer/nodes.py's
RUN = "0x" + RUN_ID.hex()
OUTAGE_S = 8.0 if QUICK else 60.0
"""The issue's target is 60 s; quick mode keeps the same path (the nodes wait at their join,
their journals hold the round in flight) with a shorter outage."""


def _ledger(chain: Any, run: OnChain, folder: Path, data: Path) -> LedgerProc:
    env = {
        "COLOCO_LEDGER_ENVIRONMENT": "test",
        "COLOCO_LEDGER_RPC_URL": chain.rpc_url,
        "COLOCO_LEDGER_DEPLOYMENT": run.deployment,
        "COLOCO_LEDGER_COMMITTER_PRIVATE_KEY": chain.accounts[1][1],
        "COLOCO_LEDGER_DATABASE_URL": f"sqlite:///{folder / 'ledger.db'}",
        "COLOCO_LEDGER_BLOB_DIR": str(folder / "blobs"),
        "COLOCO_LEDGER_ADMIN_TOKEN": ADMIN,
        "COLOCO_LEDGER_ROUND_DEADLINE_S": "300",
        "COLOCO_LEDGER_INDEXER_POLL_S": "0.1",
        "COLOCO_LEDGER_LIFECYCLE_POLL_S": "0.1",
        "COLOCO_LEDGER_JOIN_WINDOW_S": "0.5",
        "COLOCO_LEDGER_BLOB_MIN_FREE_BYTES": "0",
        "COLOCO_LEDGER_USEFULNESS_CORPUS": str(data),  # the run's pinned data
        # no audit: the nodes' model (tests/trainer/nodes.py's) is no ledger preset, so an
        # audited honest node failed its replay ("boundary state does not fit the model") and
        # its next rounds' boundary requests waited out their 60 s deadline each: as the random
        # draw fell, round 3 missed the test's 180 s (the late joiner's known flake). The audit
        # is tested with real nodes in tests/redteam/test_replayable_node.py
        "COLOCO_LEDGER_AUDIT_FRACTION": "0",
    }
    folder.mkdir(parents=True, exist_ok=True)
    return LedgerProc(folder, env)


@pytest.fixture
def served(
    chain: Any, deployment: Deployment, tmp_path: Path, corpus_dir: Path
) -> Iterator[tuple[LedgerProc, OnChain]]:
    """The ledger process with the run opened and its genesis indexed."""
    run = on_chain(chain, deployment, tmp_path, data=corpus_dir)
    led = _ledger(chain, run, tmp_path / "ledger", corpus_dir)
    led.start()
    try:
        genesis = "0x" + genesis_hash(MODEL, 0).hex()
        r = httpx.post(f"{led.url}/v1/runs", json={"run_id": RUN, "genesis_checkpoint": genesis},
                       headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)  # fmt: skip
        assert r.status_code == 201, r.text
        _wait(lambda: httpx.post(f"{led.url}/v1/joins", json={}, timeout=10).status_code != 503,
              "the ledger's chain index")  # fmt: skip
        yield led, run
    finally:
        led.stop()


def _wait(done: Any, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _members(url: str, r: int) -> set[str]:
    try:
        resp = httpx.get(f"{url}/v1/runs/{RUN}/rounds/{r}/members", timeout=5)
    except httpx.HTTPError:
        return set()
    return set(resp.json().get("members", [])) if resp.status_code == 200 else set()


def _digests(run: OnChain, records: dict[int, list[dict[str, Any]]]) -> set[str]:
    domain = Eip712Domain(chain_id=run.chain_id, verifying_contract=Address(run.ledger))
    return {"0x" + ComputeAttestation.from_json(rec["attestation"]).digest(domain).hex()
            for recs in records.values() for rec in recs}  # fmt: skip


def _committed(run: OnChain) -> int:
    return int(ChainClient(run.rpc_url, Deployment.load(Path(run.deployment))).last_round(
        RunId(RUN_ID)))  # fmt: skip


def test_outage_ledger_killed_mid_run_loses_no_signed_round(
    served: tuple[LedgerProc, OnChain], corpus_dir: Path, store_port: int, tmp_path: Path
) -> None:
    """The ledger is killed (-9) once both nodes joined round 3 at it, and restarted on the same
    database ``OUTAGE_S`` later (or once both journals hold round 3, if later). The nodes train
    round 3, keep its signed attestations in their journals, wait at round 4's join (sending
    their journals each time) instead of training rounds the ledger never hears of, and carry on
    once it is back: every signed round is stored at the ledger (0 lost), nothing is left unsent
    or lost in the journals, and each node attests again within 2 rounds of the outage."""
    led, run = served
    last = 6
    states = [tmp_path / f"node{i}" for i in range(2)]
    plans = [run.plan(i, rounds=last, min_nodes=2, ledger_url=led.url, checkpoint_dir=str(s),
                      collective_timeout_s=60.0, rendezvous_timeout_s=240.0)
             for i, s in enumerate(states)]  # fmt: skip
    procs, results, manager = start_nodes(plans, store_port, corpus_dir)
    both = {run.addresses[0], run.addresses[1]}
    _wait(lambda: _members(led.url, 3) == both, "both nodes in round 3 at the ledger")
    led.kill9()
    killed = time.monotonic()
    held: list[list[int]] = [[], []]
    while time.monotonic() - killed < OUTAGE_S or not all(3 in h for h in held):
        # down at least OUTAGE_S, and until both nodes signed round 3 (kept in their journals)
        held = [unsent_rounds(s) or h for s, h in zip(states, held, strict=True)]
        assert time.monotonic() - killed < 300, f"round 3 never reached the journals: {held}"
        time.sleep(0.2)
    outage = time.monotonic() - killed
    led.start()
    out = collect(procs, results, manager, timeout=600.0)
    assert out["exit_codes"] == [0, 0], out
    digests = _digests(run, out["results"])
    assert led.stored(digests) == len(digests), "0 signed rounds lost"
    assert all(unsent_rounds(s) == [] and lost_rounds(s) == {} for s in states)
    for k, recs in out["results"].items():
        worked = [rec["round"] for rec in recs]
        assert worked[-1] == last and 3 in worked, f"node {k} worked {worked}"
        after = [r for r in worked if r > 3]
        assert after and after[0] <= 5, f"node {k} attested again within 2 rounds: {worked}"
    print(f"ledger down {outage:.0f}s: {len(digests)} signed rounds, all stored; journals {held}")


def test_rejoin_a_node_killed_mid_round_attests_again_within_two_rounds(
    served: tuple[LedgerProc, OnChain], corpus_dir: Path, store_port: int, tmp_path: Path
) -> None:
    """Node 2 dies (exit without a word) in round 2; the others re-form without it and go on.
    Restarted with its key and state folder once round 4 opened, it skips its own earlier
    start's offers (a dead port), takes the newest verified state and attests again within 2
    rounds (the ledger bars a no-show from the 2 rounds after the one it missed)."""
    led, run = served
    last = 8
    state = tmp_path / "node2"
    plans = [run.plan(i, rounds=last, min_nodes=3, ledger_url=led.url, collective_timeout_s=20.0,
                      checkpoint_dir=str(tmp_path / f"node{i}")) for i in range(3)]  # fmt: skip
    plans[2].die_in_round = 2
    procs, results, manager = start_nodes(plans, store_port, corpus_dir)
    again = run.plan(2, rounds=last, min_nodes=1, ledger_url=led.url, collective_timeout_s=20.0,
                     checkpoint_dir=str(state), join_after_round=4)  # fmt: skip
    procs2, results2, manager2 = start_nodes([again], store_port, corpus_dir)
    out = collect(procs, results, manager, timeout=600.0)
    back = collect(procs2, results2, manager2, timeout=120.0)
    assert out["exit_codes"][:2] == [0, 0] and out["exit_codes"][2] == 17, out["exit_codes"]
    assert back["exit_codes"] == [0], back
    worked = [rec["round"] for rec in back["results"][2]]
    assert worked and worked[0] <= 6 and worked[-1] == last, f"restarted node 2 worked {worked}"
    digests = _digests(run, back["results"])
    _wait(lambda: led.stored(digests) == len(digests), "the restarted node's rounds stored")


def test_rejoin_a_late_joiner_whose_members_are_all_gone_starts_from_the_ledgers_blob(
    served: tuple[LedgerProc, OnChain], corpus_dir: Path, store_port: int
) -> None:
    """Nodes 0 and 1 train rounds 1-3 and leave; their checkpoint servers are gone, the signed
    ``ckpt/latest`` still names round 3. Node 2 then joins: it takes round 3's committed state
    from the ledger, without trying the dead peers (a hint no newer than the chain's last
    committed round is stale), and trains round 4 on its own."""
    led, run = served
    plans = [run.plan(i, rounds=3, min_nodes=2, ledger_url=led.url, collective_timeout_s=20.0)
             for i in range(2)]  # fmt: skip
    out = collect(*start_nodes(plans, store_port, corpus_dir), timeout=300.0)
    assert out["exit_codes"] == [0, 0], out
    _wait(lambda: _committed(run) >= 3, "round 3 committed on chain")
    (result3,) = {rec["result_checkpoint"] for recs in out["results"].values() for rec in recs
                  if rec["round"] == 3}  # fmt: skip
    late = run.plan(2, rounds=4, min_nodes=1, ledger_url=led.url, collective_timeout_s=20.0)
    t0 = time.monotonic()
    joined = collect(*start_nodes([late], store_port, corpus_dir), timeout=240.0)
    took = time.monotonic() - t0
    assert joined["exit_codes"] == [0], joined
    (rec,) = joined["results"][2]
    assert rec["round"] == 4 and rec["base_checkpoint"] == result3, rec
    tried = {check for check, _ in joined["refusals"][2]}
    assert "dead_endpoint" not in tried, "it chased the gone members' stale ckpt/latest"
    print(f"late joiner from the ledger's blob: round 4 attested {took:.1f}s after its start")


def test_rejoin_an_unstaked_or_unregistered_joiner_is_told_promptly(
    chain: Any, deployment: Deployment, corpus_dir: Path, store_port: int, tmp_path: Path
) -> None:
    """A node whose key is registered but not staked, and one never registered, stop at once
    with the step to take, before any checkpoint fetch or rendezvous wait."""
    from bench.harness.nodes import new_node

    run = on_chain(chain, deployment, tmp_path, data=corpus_dir)
    unstaked = new_node(chain.w3, deployment, chain.accounts[7][0], stake=0)
    plans = [replace(run.plan(0, rounds=1), private_key="0x" + unstaked.key.hex()),
             replace(run.plan(1, rounds=1), private_key="0x" + os.urandom(32).hex())]  # fmt: skip
    out = collect(*start_nodes(plans, store_port, corpus_dir), timeout=90.0)
    assert all(code not in (0, None) for code in out["exit_codes"]), out
    assert "not staked enough" in out["errors"][0] and "coloco node stake" in out["errors"][0]
    assert "not registered" in out["errors"][1] and "coloco node register" in out["errors"][1]


def test_journal_a_node_stopped_with_rounds_unsent_exits_4_naming_them(
    served: tuple[LedgerProc, OnChain], corpus_dir: Path, store_port: int, tmp_path: Path
) -> None:
    """`coloco node run` (a real process): the ledger is killed once the node joined round 1;
    the node trains it and keeps it in its journal. SIGTERM then: the node tries to send it,
    cannot, and exits 4 naming round 1, which stays in its journal for the next start."""
    import json
    import signal
    import subprocess
    import sys

    from eth_account import Account

    led, run = served
    tiny = GPTConfig.preset("tiny")
    run2 = "0x" + "cd" * 32  # a run of the CLI's tiny preset (the fixture's run is another model)
    r = httpx.post(f"{led.url}/v1/runs", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60,
                   json={"run_id": run2,
                         "genesis_checkpoint": "0x" + genesis_hash(tiny, 0).hex()})  # fmt: skip
    assert r.status_code == 201, r.text
    chain = ChainClient(run.rpc_url, Deployment.load(Path(run.deployment)))
    _wait(lambda: chain.has_committed(RunId(bytes.fromhex(run2[2:]))), "run 2's genesis")
    keystore, password = tmp_path / "node.json", tmp_path / "password"
    password.write_text("pw")
    keystore.write_text(json.dumps(Account.encrypt(run.keys[0], "pw")))
    state = tmp_path / "state"
    argv = [sys.executable, "-m", "coloco_cli", "node", "run", "--run-id", run2,
            "--keystore", str(keystore), "--password-file", str(password),
            "--rpc-url", run.rpc_url, "--deployment", run.deployment, "--ledger-url", led.url,
            "--rendezvous", f"127.0.0.1:{store_port}", "--data", str(corpus_dir),
            "--checkpoint-dir", str(state), "--batch-size", "2", "--plain"]  # fmt: skip
    log = (tmp_path / "node.log").open("wb")  # a file: a full pipe would stall the node
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    try:
        url = f"{led.url}/v1/runs/{run2}/rounds/1/members"
        _wait(lambda: run.addresses[0] in httpx.get(url, timeout=5).json().get("members", []),
              "the node's join of round 1")  # fmt: skip
        led.kill9()
        _wait(lambda: unsent_rounds(state) == [1], "round 1 in the journal", timeout=300)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    output = (tmp_path / "node.log").read_text(errors="replace")
    assert proc.returncode == 4, output[-3000:]
    assert "attestations of rounds [1]" in output and "journal" in output, output[-3000:]
    assert unsent_rounds(state) == [1], "kept for the next start"
