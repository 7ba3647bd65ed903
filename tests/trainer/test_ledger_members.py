"""The rendezvous closes each round's member list from the joins the ledger accepted.

Real node processes (gloo), a real anvil with the deployed contracts and registered nodes, and the
real ledger served over HTTP with its worker (it closes, scores and commits rounds on chain) and a
0.2 s join window. Nodes start 0.3 s apart and the later ones' first ledger joins arrive after the
round started there (refused: ``round_started``). Before, the first node waited at the rendezvous
for nodes that would never come (the 60 s rendezvous timeout), the refused ones waited for it in
the next round, and the run split. Now: a refused node is not a member of that round anywhere and
nobody waits for it; it joins the next round (fetching the checkpoint from a peer); no member list
opens at a timeout; every node is credited from the round it got into.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from ledger.core.config import Settings
from ledger.main import create_app
from ledger.service import Ledger
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import free_port
from protocol.types import RoundNumber, RunId
from reference.model import GPTConfig
from tests.ledger.conftest import ADMIN
from tests.trainer.nodes import RUN_ID, collect, start_nodes
from tests.trainer.rogue import (
    OnChain,
    assert_agree,
    by_round,
    checks,
    on_chain,
    start_rogue,
    stop_rogue,
)
from trainer.round.recovery import genesis_hash

pytestmark = [pytest.mark.distributed, pytest.mark.anvil]

MODEL = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32)  # tests/trainer/nodes.py's
RUN = "0x" + RUN_ID.hex()


@pytest.fixture
def served(
    request: pytest.FixtureRequest,
    chain: Any,
    deployment: Deployment,
    tmp_path: Path,
    corpus_dir: Path,
) -> Iterator[tuple[str, OnChain]]:
    """The ledger app on a free port with its worker running, the run's genesis committed; its
    join window 0.2 s, or the test's indirect parameter."""
    window = float(getattr(request, "param", 0.2))
    run = on_chain(chain, deployment, tmp_path, data=corpus_dir)
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, environment="test", rpc_url=chain.rpc_url,
        deployment=Path(run.deployment), committer_private_key=chain.accounts[1][1],
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}", blob_dir=tmp_path / "blobs",
        admin_token=ADMIN, run_background=True, confirmations=0, round_deadline_s=300,
        indexer_poll_s=0.1, lifecycle_poll_s=0.1, join_window_s=window, usefulness_model=None,
    )  # fmt: skip
    service = Ledger(settings)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(ledger=service), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert time.monotonic() < deadline, "the ledger did not start"
            time.sleep(0.05)
        genesis = "0x" + genesis_hash(MODEL, 0).hex()
        r = httpx.post(f"{url}/v1/runs", json={"run_id": RUN, "genesis_checkpoint": genesis},
                       headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)  # fmt: skip
        assert r.status_code == 201, r.text
        while httpx.post(f"{url}/v1/joins", json={}, timeout=10).status_code == 503:
            time.sleep(0.1)  # (a malformed join: 422 once the app answers)
        _wait(lambda: service.indexer.snapshot.last_round.get(RUN) == 0, "genesis indexed")
        yield url, run
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        service.stop()


def _wait(done: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_refused_joins_do_not_split_the_run(
    served: tuple[str, OnChain], corpus_dir: Path, store_port: int
) -> None:
    url, run = served
    last = 4
    plans = [  # the demo's shape: every node waits for all three in the first round
        run.plan(i, rounds=last, min_nodes=3, ledger_url=url, start_delay_s=0.3 * i,
                 collective_timeout_s=60.0)
        for i in range(3)
    ]  # fmt: skip
    plans[1].late_first_join = True  # refused for sure; node 2 0.3 s later, refused or not
    t0 = time.monotonic()
    out = collect(*start_nodes(plans, store_port, corpus_dir), timeout=300.0)
    took = time.monotonic() - t0
    assert out["exit_codes"] == [0, 0, 0], out
    assert out["timeouts"] == {0: [], 1: [], 2: []}, "a member list opened at the timeout"
    assert out["stalled"] == {0: [], 1: [], 2: []}, out["stalled"]
    members = {r: set(httpx.get(f"{url}/v1/runs/{RUN}/rounds/{r}/members").json()["members"])
               for r in range(1, last + 1)}  # fmt: skip
    rounds = by_round(out["results"])
    assert sorted(rounds) == list(range(1, last + 1))
    for r, recs in rounds.items():
        trained = {run.addresses[k] for k in recs}
        # one group per round (no split): exactly the ledger's members, in one attempt
        assert trained == members[r], f"round {r}: trained {trained}, ledger {members[r]}"
        for rec in recs.values():
            assert set(rec["members"]) == trained and rec["attempts"] == 1, rec
    assert_agree(rounds)
    for k, recs in out["results"].items():  # credited from the round it got into, every round
        worked = [rec["round"] for rec in recs]
        assert worked == list(range(worked[0], last + 1)), f"node {k} worked {worked}"
    (refused,) = out["refused_joins"][1]
    assert run.addresses[1] not in members[refused], "its first join was refused by the ledger"
    assert out["results"][1][0]["round"] == refused + 1, "it trained from the next round on"
    chain = ChainClient(run.rpc_url, Deployment.load(Path(run.deployment)))
    _wait(lambda: chain.last_round(RunId(RUN_ID)) >= last, f"round {last} committed")
    for r, recs in rounds.items():  # the ledger's own outer step gives the nodes' weights
        (result,) = {rec["result_checkpoint"] for rec in recs.values()}
        committed = bytes(chain.checkpoint_of(RunId(RUN_ID), RoundNumber(r)))
        assert "0x" + committed.hex() == result, f"round {r}"
    print(f"3 nodes, {last} rounds, 0.2 s ledger join window: {took:.1f}s")


@pytest.mark.slow  # ~90 s on a loaded machine; quick mode keeps the test above (same code path)
def test_rogue_member_outside_the_ledger_is_refused(
    served: tuple[str, OnChain], corpus_dir: Path, store_port: int
) -> None:
    """A registered, staked node that skips the ledger's join closes every round itself with the
    honest joins and its own (valid signatures, the closer a member of its list). The honest
    nodes refuse that list (``not_admitted``: its join was not accepted by the ledger), replace
    it with their own, and train every round with exactly the ledger's members."""
    url, run = served
    plans = [run.plan(i, rounds=2, min_nodes=2, ledger_url=url) for i in range(2)]
    info = run.info(honest=run.addresses[:2], rounds=2, private_key=run.keys[3])
    rogue = start_rogue("outsider", store_port, info)
    try:
        out = collect(*start_nodes(plans, store_port, corpus_dir), timeout=300.0)
    finally:
        stop_rogue(rogue)
    assert out["exit_codes"] == [0, 0], out["exit_codes"]
    rounds = by_round(out["results"])
    assert sorted(rounds) == [1, 2]
    for r, recs in rounds.items():
        ledger = set(httpx.get(f"{url}/v1/runs/{RUN}/rounds/{r}/members").json()["members"])
        assert run.addresses[3] not in ledger
        for rec in recs.values():
            assert set(rec["members"]) <= ledger and run.addresses[3] not in rec["members"], rec
    assert_agree(rounds)
    refused = [c for k in (0, 1) for c in out["refusals"][k]]
    assert "not_admitted" in checks(refused, "members/"), refused


def test_a_sybil_that_joins_only_at_the_ledger_costs_a_round_seconds_not_the_timeout(
    served: tuple[str, OnChain], corpus_dir: Path, store_port: int
) -> None:
    """F12: a registered, staked node joins every round at the ledger, never at the rendezvous,
    and keeps heartbeating. The honest members waited for it until the rendezvous timeout
    (every list opened at the timeout, 20 s here, 60 s by default); now they stop waiting for a
    node the ledger took but which never joined here ``no_show_s`` (2 s) after they first saw it
    missing, and count it as a no-show."""
    url, run = served
    sybil = run.addresses[3]
    plans = [run.plan(i, rounds=2, min_nodes=2, ledger_url=url, rendezvous_timeout_s=20.0,
                      no_show_s=2.0, collective_timeout_s=60.0) for i in range(2)]  # fmt: skip
    info = run.info(rounds=2, private_key=run.keys[3], ledger_url=url)
    rogue = start_rogue("sybil", store_port, info)
    t0 = time.monotonic()
    try:
        out = collect(*start_nodes(plans, store_port, corpus_dir), timeout=300.0)
    finally:
        stop_rogue(rogue)
    took = time.monotonic() - t0
    assert out["exit_codes"] == [0, 0], out["exit_codes"]
    ledger = {r: set(httpx.get(f"{url}/v1/runs/{RUN}/rounds/{r}/members").json()["members"])
              for r in (1, 2)}  # fmt: skip
    sybil_rounds = {r for r, m in ledger.items() if sybil in m}
    assert sybil_rounds, "the sybil's ledger joins were accepted (it races a 0.2 s window)"
    assert out["timeouts"] == {0: [], 1: []}, f"a list opened at the timeout: {out['timeouts']}"
    rounds = by_round(out["results"])
    assert sorted(rounds) == [1, 2]
    for recs in rounds.values():
        for rec in recs.values():
            assert sybil not in rec["members"] and rec["attempts"] == 1, rec
    assert_agree(rounds)
    waited = {(r, a) for k in (0, 1) for r, a in out["no_shows"][k]}
    assert {(r, sybil) for r in sybil_rounds} <= waited, out["no_shows"]
    print(f"2 rounds beside a ledger-only sybil: {took:.1f}s (rendezvous timeout 20 s)")


def _late_joiner_run(url: str, run: OnChain, corpus_dir: Path, store_port: int,
                     **late: bool) -> list[int]:  # fmt: skip
    """Nodes 0 and 1 train rounds 1..5; node 2 starts once round 2's list opened, with the
    ``late`` fault of tests/trainer/nodes.py. Every round's ledger members must be exactly the
    nodes that trained it (a joiner counted and absent is a no-show), node 2 must work every
    round from its first, and the results agree. The rounds node 2 worked."""
    last = 5
    plans = [run.plan(i, rounds=last, min_nodes=2, ledger_url=url) for i in range(3)]
    plans[2].join_after_round = 2
    for name, value in late.items():
        setattr(plans[2], name, value)
    out = collect(*start_nodes(plans, store_port, corpus_dir), timeout=300.0)
    assert out["exit_codes"] == [0, 0, 0], out
    rounds = by_round(out["results"])
    assert sorted(rounds) == list(range(1, last + 1))
    for r, recs in rounds.items():
        ledger = set(httpx.get(f"{url}/v1/runs/{RUN}/rounds/{r}/members").json()["members"])
        trained = {run.addresses[k] for k in recs}
        assert ledger == trained, f"round {r}: ledger members {ledger}, trained {trained}"
    worked = [rec["round"] for rec in out["results"][2]]
    assert worked and worked == list(range(worked[0], last + 1)), f"the joiner worked {worked}"
    assert_agree(rounds)
    return worked


@pytest.mark.parametrize("served", [3.0], indirect=True)
def test_a_joiner_late_for_an_opened_list_skips_that_round_rather_than_no_show(
    served: tuple[str, OnChain], corpus_dir: Path, store_port: int
) -> None:
    """The demo's late joiner: it starts up (fetching round r-1's state) while the members'
    list of round r opens without it. The ledger's 3 s join window outlasts the rendezvous' 1 s,
    so a ledger join of r would still be taken, the members would train r without the node, and
    the ledger would count a no-show and refuse its next joins (``no_show``): the demo's "node-4
    exited before its last round". The node now sees the list opened without it and joins the
    next round instead: every round's ledger members are exactly the nodes that trained it."""
    url, run = served
    worked = _late_joiner_run(url, run, corpus_dir, store_port, late_first_round=True)
    assert worked[0] >= 3, worked  # it started after round 2's list opened


@pytest.mark.parametrize("served", [3.0], indirect=True)
def test_a_joiner_inside_the_members_window_joins_the_next_round(
    served: tuple[str, OnChain], corpus_dir: Path, store_port: int
) -> None:
    """The same race one step earlier: the joiner comes to round r while the members, who have
    joined it, wait out their join window, and its ledger join lands only once their list
    opened (a slow round trip). It no longer joins r once others have joined it without it
    (``Rendezvous.forming_without_me``): it joins r + 1 while they train r."""
    url, run = served
    _late_joiner_run(url, run, corpus_dir, store_port, late_in_window=True)
