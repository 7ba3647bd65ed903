"""A node against the real chain (anvil + deployed contracts) and the real ledger app.

Config comes from TrainingConfig every round (a change executed by the Timelock between rounds is
what the next round trains with and attests); the genesis checkpoint is checked against the
chain; attestations and blobs go to the ledger, which accepts them, idempotently.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from bench.harness.nodes import domain_of
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.errors import (
    AttestationRejected,
    CheckpointError,
    LedgerError,
    LedgerUnavailableError,
)
from protocol.keys import NodeKey
from reference.data import Corpus
from reference.model import GPTConfig
from reference.settings import TrainingSettings
from tests.ledger.conftest import (  # noqa: F401 - pytest fixtures
    ADMIN,
    client,
    db_url,
    deployment_file,
    ledger,
    nodes,
    settings_for,
)
from tests.ledger.helpers import governance_sets, tick_until
from trainer.network.ledger_client import LedgerClient, RetryPolicy
from trainer.network.membership import MembershipConfig
from trainer.round.attest import Attester
from trainer.round.node import NodeRunner, NodeSettings
from trainer.round.recovery import Recovery, genesis_checkpoint, genesis_hash
from trainer.round.runconfig import ChainConfig
from trainer.round.schedule import RoundReport

pytestmark = [pytest.mark.anvil]

SMALL = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32)
RUN = bytes.fromhex("5e" * 32)


def _node(
    chain: AnvilProcess,
    deployment: Deployment,
    key: NodeKey,
    corpus_dir: Path,
    store_port: int,
    ledger_client: LedgerClient | None,
    rounds: int,
    overlap: bool = True,
) -> NodeRunner:
    cc = ChainClient(chain.rpc_url, deployment)
    settings = NodeSettings(
        run_id=RUN, model=SMALL, rendezvous_port=store_port,
        membership=MembershipConfig(min_nodes=1, join_window_s=0.0),
        data_path=str(corpus_dir), max_rounds=rounds, eval_rows=8, overlap=overlap,
        bounded_overlap=overlap,
    )  # fmt: skip
    return NodeRunner(
        settings,
        Attester(key, domain_of(deployment), RUN, ledger_client),
        ChainConfig(cc, batch_size=4),
        recovery=Recovery(RUN, SMALL, 0, chain=cc, ledger=ledger_client),
    )


def test_config_change_on_chain_is_picked_up_next_round(
    chain: AnvilProcess,
    deployment: Deployment,
    nodes: list[Any],  # noqa: F811
    corpus_dir: Path,
    store_port: int,
) -> None:
    governance_sets(chain, deployment, "setInnerLoop", 3, 3000)
    governance_sets(chain, deployment, "setDataMixture", [7000, 3000])
    governance_sets(chain, deployment, "setDataRoot", Corpus.from_folder(corpus_dir).root)
    before = TrainingSettings.read(ChainClient(chain.rpc_url, deployment))
    key = NodeKey.from_private_key(nodes[0].key)  # registered and staked: members admit it
    # lockstep: round 1 is reported before round 2 reads its config (on the overlap schedule it
    # is reported at the end of round 2, and a vote passed then reaches round 3)
    runner = _node(chain, deployment, key, corpus_dir, store_port, None, rounds=2, overlap=False)

    def vote_passed(report: RoundReport) -> None:
        if report.round == 1:
            governance_sets(chain, deployment, "setInnerLoop", 5, 2000)

    runner.on_round = vote_passed
    r1, r2 = runner.run()
    a1, a2 = r1.signed.attestation, r2.signed.attestation
    assert a1.config_version == before.version and a1.inner_steps == 3
    assert a2.config_version == before.version + 1 and a2.inner_steps == 5
    assert a2.tokens == 5 * 4 * SMALL.seq_len
    assert r2.config.settings.inner.lr == pytest.approx(0.002)
    assert r2.config.mixture == (7000, 3000)


def test_attestations_and_blobs_are_accepted_by_the_real_ledger(
    chain: AnvilProcess,
    deployment: Deployment,
    client: TestClient,  # noqa: F811
    ledger: Any,  # noqa: F811
    nodes: list[Any],  # noqa: F811
    corpus_dir: Path,
    store_port: int,
) -> None:
    governance_sets(chain, deployment, "setInnerLoop", 3, 3000)
    governance_sets(chain, deployment, "setDataRoot", Corpus.from_folder(corpus_dir).root)
    r = client.post(
        "/v1/runs",
        json={
            "run_id": "0x" + RUN.hex(),
            "genesis_checkpoint": "0x" + genesis_hash(SMALL, 0).hex(),
        },
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 201, r.text
    ledger.indexer.catch_up()
    key = NodeKey.from_private_key(nodes[0].key)
    lc = LedgerClient("http://testserver", http=client)
    runner = _node(chain, deployment, key, corpus_dir, store_port, lc, rounds=2)
    report, second = runner.run()  # genesis checked against checkpointOf(run, 0) on chain
    assert report.signed.ledger_id is not None
    att = report.signed.attestation
    again = lc.submit_attestation(att, report.signed.signature, [key.address])
    assert again == report.signed.ledger_id, "re-posting the same attestation is idempotent"
    with pytest.raises(LedgerError, match="not_yet_public"):  # no copying from an open round
        lc.get_blob(att.pseudo_gradient)
    assert lc.get_blob(att.result_checkpoint) is not None, "rank 0 uploaded the checkpoint"
    assert lc.get_blob(att.base_checkpoint) is not None, "genesis uploaded: round 1 is scorable"
    # The ledger settles the round (one member, it declared itself) and commits it on chain;
    # a node that restarts with no peer and no local checkpoint recovers those weights from the
    # ledger's blob store, checked against checkpointOf(run, 1).
    tick_until(ledger, "0x" + RUN.hex(), 1, "committed", timeout=60.0)
    cc = ChainClient(chain.rpc_url, deployment)
    # the ledger computed the outer step itself: the same bits as the node's
    assert bytes(cc.checkpoint_of(RUN, 1)) == att.result_checkpoint
    pg_blob = lc.get_blob(att.pseudo_gradient)  # public once the round is scored
    assert pg_blob is not None and len(pg_blob) > 1000
    # round 2 is judged against round 1's decoded commitments (magnitude, copies): committed too
    tick_until(ledger, "0x" + RUN.hex(), 2, "committed", timeout=60.0)
    assert bytes(cc.checkpoint_of(RUN, 2)) == second.signed.attestation.result_checkpoint
    cold = Recovery(RUN, SMALL, 0, chain=cc, ledger=lc)
    restored = cold.from_ledger(1)
    assert restored is not None and restored.weights_hash == att.result_checkpoint
    with pytest.raises(CheckpointError, match="the chain committed"):
        Recovery(RUN, SMALL, 1, chain=cc).verify(genesis_checkpoint(SMALL, 1, RUN), "genesis")

    stranger = NodeKey.from_private_key(bytes([9]) * 32)  # not registered on chain
    forged = dataclasses.replace(att, node=stranger.address)
    with pytest.raises(AttestationRejected) as err:
        lc.submit_attestation(
            forged, stranger.sign_attestation(forged, domain_of(deployment)), [stranger.address]
        )
    assert err.value.code != "http_422", err.value.message  # a verdict with the ledger's own code


def test_unreachable_ledger_is_a_clear_error() -> None:
    lc = LedgerClient("http://127.0.0.1:9", retry=RetryPolicy(attempts=2, base_delay_s=0.01))
    with pytest.raises(LedgerUnavailableError, match="did not answer after 2 attempts"):
        lc.health()
