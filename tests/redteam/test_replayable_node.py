"""The default trainer is auditable: a real :class:`trainer.round.node.NodeRunner` (the code
``coloco node run`` runs) trains two rounds against anvil and the ledger, which replays every one
of its node-rounds (audit fraction 1) and finds each the declared work: the node starts a fresh
inner AdamW every round (``RoundSettings.keep_inner_state`` False), so a round is a pure function
of the base, the shard and the governed settings; it trains on one torch thread as the replay does,
so the replay matches bit for bit in a process set to two. With the AdamW state carried across
rounds, round 2 fails the replay (the second test)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from bench.harness.nodes import domain_of
from ledger.core.config import Settings
from ledger.main import create_app
from ledger.service import Ledger
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.keys import NodeKey
from reference.data import Corpus
from reference.model import GPTConfig
from tests.ledger.conftest import (  # noqa: F401 - pytest fixtures
    ADMIN,
    db_url,
    deployment_file,
    nodes,
    settings_for,
)
from tests.ledger.helpers import tick_until
from tests.trainer.conftest import corpus_dir, store_port  # noqa: F401 - pytest fixtures
from tests.trainer.test_chain_ledger import _as_timelock
from trainer.network.ledger_client import LedgerClient
from trainer.network.membership import MembershipConfig
from trainer.round.attest import Attester
from trainer.round.node import NodeRunner, NodeSettings
from trainer.round.recovery import Recovery, genesis_hash
from trainer.round.runconfig import ChainConfig, RunConfig

pytestmark = [pytest.mark.anvil]

TINY = GPTConfig.preset("tiny")
RUN = bytes.fromhex("a7" * 32)
ROUNDS = 2  # the round window: the test ticks the ledger only after the node ran


class _KeepState(ChainConfig):
    """The chain's config, with the inner AdamW state carried across rounds."""

    def read(self, block: int | None = None) -> RunConfig:
        cfg = super().read(block)
        return dataclasses.replace(cfg, settings=cfg.settings.with_inner_state(True))


def _audited_rounds(
    chain: AnvilProcess,
    deployment: Deployment,
    settings_for: Callable[..., Settings],  # noqa: F811
    db_url: str,  # noqa: F811
    key: NodeKey,
    corpus: Path,
    port: int,
    config: type[ChainConfig],
    states: tuple[str, ...],
) -> list[dict[str, Any]]:
    """The node's scores once round r reached ``states[r - 1]`` (final: nothing was paid)."""
    _as_timelock(chain, deployment, "setDataRoot", Corpus.from_folder(corpus).root)  # the run's
    settings = settings_for(
        db_url, audit_fraction=1.0, usefulness_model="tiny", usefulness_corpus=corpus
    )
    ledger = Ledger(settings)
    try:
        with TestClient(create_app(ledger=ledger)) as client:
            genesis = "0x" + genesis_hash(TINY, 0).hex()
            r = client.post(
                "/v1/runs",
                json={"run_id": "0x" + RUN.hex(), "genesis_checkpoint": genesis},
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            assert r.status_code == 201, r.text
            ledger.indexer.catch_up()
            lc = LedgerClient("http://testserver", http=client)
            cc = ChainClient(chain.rpc_url, deployment)
            node = NodeRunner(
                NodeSettings(
                    run_id=RUN,
                    model=TINY,
                    rendezvous_port=port,
                    membership=MembershipConfig(min_nodes=1, join_window_s=0.0),
                    data_path=str(corpus),
                    max_rounds=ROUNDS,
                    eval_rows=8,
                ),
                Attester(key, domain_of(deployment), RUN, lc),
                config(cc, batch_size=4),
                recovery=Recovery(RUN, TINY, 0, chain=cc, ledger=lc),
            )
            threads = torch.get_num_threads()
            torch.set_num_threads(2)  # an operator's process on two cores: the node trains on one
            try:
                node.run()
            finally:
                torch.set_num_threads(threads)
            scores = []
            for r_, state in enumerate(states, start=1):
                tick_until(ledger, "0x" + RUN.hex(), r_, state, timeout=120.0)
                got = client.get(f"/v1/runs/0x{RUN.hex()}/rounds/{r_}").json()
                scores += got["scores"]
            return scores
    finally:
        ledger.stop()


def test_every_round_of_the_default_node_passes_the_replay_audit(
    chain: AnvilProcess,
    deployment: Deployment,
    settings_for: Callable[..., Settings],  # noqa: F811
    db_url: str,  # noqa: F811
    nodes: list[Any],  # noqa: F811
    corpus_dir: Path,  # noqa: F811
    store_port: int,  # noqa: F811
) -> None:
    key = NodeKey.from_private_key(nodes[0].key)
    scores = _audited_rounds(
        chain,
        deployment,
        settings_for,
        db_url,
        key,
        corpus_dir,
        store_port,
        ChainConfig,
        ("committed",) * ROUNDS,
    )
    assert len(scores) == ROUNDS
    for s in scores:
        assert s["verified"] and int(s["reward"]) > 0, s
        assert "audited (" in s["reason"] and "replay matches" in s["reason"], s
        assert "relative L2 error 0.00e+00" in s["reason"], s  # bit for bit: the same kernels


@pytest.mark.slow
def test_carried_adamw_state_fails_the_replay(
    chain: AnvilProcess,
    deployment: Deployment,
    settings_for: Callable[..., Settings],  # noqa: F811
    db_url: str,  # noqa: F811
    nodes: list[Any],  # noqa: F811
    corpus_dir: Path,  # noqa: F811
    store_port: int,  # noqa: F811
) -> None:
    key = NodeKey.from_private_key(nodes[0].key)
    scores = _audited_rounds(
        chain,
        deployment,
        settings_for,
        db_url,
        key,
        corpus_dir,
        store_port,
        _KeepState,
        ("committed", "final"),
    )
    first, *later = sorted(scores, key=lambda s: s["round"])
    assert "replay matches" in first["reason"], first  # a fresh AdamW either way
    assert later and all(s["reason"].startswith("[audit_failed]") for s in later), later
