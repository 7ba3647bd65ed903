"""A round is judged under the TrainingConfig version it was trained with, not the one in force
when the ledger scores it.

A vote executed while a round is in flight (after its members read the config at the round's
open block) reaches the chain before the ledger scores the round. The judge read the settings in
force at scoring time, so every honest member of that round was held to settings it never
trained with: a lowered ``innerSteps`` failed them all (``work_mismatch``), a changed inner lr
or trace interval failed their audits. The indexer now keeps every version it has read (at the
latest block, while that version was the chain's) and the judge takes the version the round's
attestations sign.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from bench.harness.nodes import NodeKey, attestation, gradient_blob, h
from ledger.chain.indexer import Indexer
from ledger.core.models import Attestation
from ledger.service import Ledger
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.eip712 import Eip712Domain
from reference.settings import TrainingSettings
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body, governance_sets, join, tick_until, upload_headers

pytestmark = [pytest.mark.anvil]


def _attest(
    client: TestClient,
    run: str,
    node: NodeKey,
    domain: Eip712Domain,
    members: list[str],
    *,
    version: int,
    inner_steps: int,
    seed: int,
    base: str = GENESIS,
) -> None:
    digest, data, _ = gradient_blob(seed)
    headers = upload_headers(node, domain, digest)
    assert client.put(f"/v1/blobs/{digest}", content=data, headers=headers).status_code == 201
    att = attestation(
        node, run_id=run, round_=1, base=base, result=h("result-1"), pseudo_gradient=digest,
        tokens=inner_steps * 20, inner_steps=inner_steps, config_version=version,
    )  # fmt: skip
    r = client.post("/v1/attestations", json=body(att, node.key, domain, members))
    assert r.status_code == 202, r.text


def _vote(
    chain: AnvilProcess, deployment: Deployment, ledger: Ledger, fn: str, *args: object
) -> TrainingSettings:
    """A TrainingConfig setter executed as the Timelock, indexed; the settings now in force,
    one version past those before."""
    before = ledger.indexer.snapshot.config
    governance_sets(chain, deployment, fn, *args)
    ledger.indexer.catch_up()
    after = ledger.indexer.snapshot.config
    assert before is not None and after is not None and after.version == before.version + 1
    return after


def _join_round_1(
    client: TestClient, nodes: list[NodeKey], run: str, domain: Eip712Domain
) -> list[str]:
    """Every node joins round 1 (accepted); their addresses."""
    for n in nodes:
        assert join(client, n, run, 1, domain).status_code == 202
    return [n.address for n in nodes]


def _verdicts(ledger: Ledger, run: str) -> dict[str, tuple[bool, str]]:
    with Session(ledger.engine) as s:
        rows = s.exec(select(Attestation).where(Attestation.run_id == run)).all()
        return {a.node: (bool(a.verified), a.reason or "") for a in rows}


@pytest.mark.parametrize("minority", [False, True], ids=["members", "one-on-an-old-version"])
def test_a_vote_executed_mid_round_does_not_change_how_the_round_is_judged(
    chain: AnvilProcess,
    deployment: Deployment,
    client: TestClient,
    ledger: Ledger,
    started_run: str,
    nodes: list[NodeKey],
    domain: Eip712Domain,
    minority: bool,
) -> None:
    before = ledger.indexer.snapshot.config
    assert before is not None
    h_before = before.inner_steps
    members = _join_round_1(client, nodes, started_run, domain)
    # the members trained round 1 under the version in force when it opened ...
    for i, n in enumerate(nodes[:2]):
        _attest(client, started_run, n, domain, members, version=before.version,
                inner_steps=h_before, seed=10 + i)  # fmt: skip
    # ... and a vote lowering H executes before the ledger scores the round
    after = _vote(chain, deployment, ledger, "setInnerLoop", 10, 2000)
    assert after.inner_steps == 10
    if minority:  # the third member signs the new version: the round's members signed the old one
        _attest(client, started_run, nodes[2], domain, members, version=after.version,
                inner_steps=10, seed=12)  # fmt: skip
    else:
        _attest(client, started_run, nodes[2], domain, members, version=before.version,
                inner_steps=h_before, seed=12)  # fmt: skip
    tick_until(ledger, started_run, 1, ("committed", "final"), timeout=30)
    verdicts = _verdicts(ledger, started_run)
    for n in nodes[:2]:
        ok, reason = verdicts[n.address]
        assert ok, reason
        assert "work_mismatch" not in reason
    ok, reason = verdicts[nodes[2].address]
    if minority:
        assert not ok and "[config_mismatch]" in reason, reason
        assert f"configVersion {after.version}" in reason and f"{before.version}" in reason
    else:
        assert ok, reason


def test_the_indexer_keeps_every_config_version_across_a_restart(
    chain: AnvilProcess, deployment: Deployment, client: TestClient, ledger: Ledger
) -> None:
    ledger.indexer.catch_up()
    first = ledger.indexer.snapshot.config
    assert first is not None
    # two votes, each indexed before the next (a ledger polls the head every second or so)
    _vote(chain, deployment, ledger, "setInnerLoop", 10, 2000)
    _vote(chain, deployment, ledger, "setTraceInterval", 2)
    configs = ledger.indexer.snapshot.configs
    assert configs[first.version] == first
    assert (configs[first.version + 1].inner_steps, configs[first.version + 1].trace_interval) == (
        10,
        first.trace_interval,
    )
    assert (configs[first.version + 2].inner_steps, configs[first.version + 2].trace_interval) == (
        10,
        2,
    )
    assert ledger.indexer.snapshot.config == configs[first.version + 2]
    # a restarted ledger reads them back from its database
    again = Indexer(ledger.engine, ledger.indexer.chain).load()
    assert again.configs == configs


def test_round_r_minus_1_is_read_under_the_version_it_signed(
    client: TestClient, ledger: Ledger
) -> None:
    """Round r's audit reads the node's round r-1 last boundary (its AdamW continuity, the
    sparse residual): where that boundary is depends on round r-1's trace interval."""
    from dataclasses import replace

    from ledger.judge import continuity, segments
    from ledger.judge.entries import Context
    from reference.trace import boundary_steps

    current = ledger.indexer.snapshot.config
    assert current is not None
    old = replace(current, version=current.version + 1, trace_interval=5)
    new = replace(current, version=current.version + 2, trace_interval=2)
    ctx = Context(
        settings=ledger.settings, blobs=ledger.blobs, config=new, base=GENESIS, last_round=1,
        members=None, usefulness=None, start_of=lambda a: a.received_at,
        configs={old.version: old, new.version: new},
    )  # fmt: skip
    previous = Attestation(node="0x" + "11" * 20, round=1, inner_steps=50,
                           config_version=old.version)  # fmt: skip
    last = len(boundary_steps(50, 5)) - 1
    assert last != len(boundary_steps(50, 2)) - 1
    assert [at for at, _ in continuity.previous_needs(previous, ctx)] == [last]
    assert max(at for at, _ in segments.previous_needs(previous, ctx)) == last


def test_a_round_signed_under_a_version_the_ledger_never_read_is_judged_as_before(
    client: TestClient, ledger: Ledger
) -> None:
    """A ledger started after a vote never read the version before it: a round its members
    signed under that version is judged under the current settings (what the ledger did before
    it kept versions), not failed; a minority on another version still fails."""
    from dataclasses import replace

    from ledger.judge.claims import round_config

    read = ledger.indexer.snapshot.config
    assert read is not None
    current, older = replace(read, version=5), 4

    def signed(version: int) -> Attestation:
        return Attestation(node="0x" + "22" * 20, round=1, config_version=version)

    atts = [signed(older), signed(older), signed(current.version)]
    assert round_config(atts, {current.version: current}, current) == replace(
        current, version=older
    )
    known = replace(current, version=older, inner_steps=current.inner_steps + 1)
    assert round_config(atts, {older: known, current.version: current}, current) == known
    # ties go to the newer version
    assert round_config(atts[1:], {older: known, current.version: current}, current) == current


def test_attesters_outside_the_round_cannot_outvote_its_members_onto_another_version(
    client: TestClient, ledger: Ledger
) -> None:
    """Three staked nodes that did not join the round (or attest another base) sign an older
    version: counted, they would make it the round's and fail both members config_mismatch.
    Only members' attestations on the committed base choose the version."""
    from dataclasses import replace

    from ledger.judge.claims import round_config

    read = ledger.indexer.snapshot.config
    assert read is not None
    current, older = replace(read, version=5), replace(read, version=4, inner_steps=7)
    configs = {4: older, 5: current}
    members = frozenset({"0x" + "01" * 20, "0x" + "02" * 20})

    def signed(node: str, version: int, base: str = GENESIS) -> Attestation:
        return Attestation(node=node, round=1, config_version=version, base_checkpoint=base)

    honest = [signed(m, 5) for m in sorted(members)]
    outsiders = [signed("0x" + f"{i:02x}" * 20, 4) for i in (7, 8, 9)]
    stale = [signed(sorted(members)[0], 4, base="0x" + "ee" * 32)] * 3
    assert round_config([*honest, *outsiders], configs, current) == older  # unfiltered
    assert round_config([*honest, *outsiders], configs, current, members=members) == current
    assert round_config([*honest, *stale], configs, current, base=GENESIS) == current


def test_members_on_a_stale_base_do_not_choose_the_rounds_version(
    chain: AnvilProcess,
    deployment: Deployment,
    client: TestClient,
    ledger: Ledger,
    started_run: str,
    nodes: list[NodeKey],
    domain: Eip712Domain,
) -> None:
    """Two members attest round 1 on a base that is not the committed checkpoint, under the
    version before a vote; one attests the committed base under the version in force. The two
    fail ``stale_base`` and do not make their version the round's: the third is paid."""
    before = ledger.indexer.snapshot.config
    assert before is not None
    after = _vote(chain, deployment, ledger, "setInnerLoop", before.inner_steps, 2000)
    members = _join_round_1(client, nodes, started_run, domain)
    honest, *stale = nodes
    _attest(client, started_run, honest, domain, members, version=after.version,
            inner_steps=after.inner_steps, seed=20)  # fmt: skip
    for i, n in enumerate(stale):
        _attest(client, started_run, n, domain, members, version=before.version,
                inner_steps=before.inner_steps, seed=21 + i, base=h("another-base"))  # fmt: skip
    tick_until(ledger, started_run, 1, ("committed", "final"), timeout=30)
    verdicts = _verdicts(ledger, started_run)
    ok, reason = verdicts[honest.address]
    assert ok, reason
    for n in stale:
        assert "[stale_base]" in verdicts[n.address][1], verdicts[n.address]
