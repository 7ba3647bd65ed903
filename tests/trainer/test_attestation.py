"""A node's signed attestation carries exactly what it trained, and a replay reproduces it."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from protocol.attestation import ATTESTATION_ATTRS
from protocol.blobs import decode_blob
from protocol.eip712 import Eip712Domain
from protocol.hashing import hash_state_dict
from protocol.keys import NodeKey
from protocol.signing import verify_attestation
from reference.checkpoint import CheckpointDir
from reference.data import Corpus, ShardSpec
from reference.model import GPT, GPTConfig
from reference.trace import check_served
from tests.trainer.nodes import DEV_KEYS, RUN_ID
from trainer.network.membership import MembershipConfig
from trainer.round.attest import WORK_FIELDS, Attester, WorkRecord
from trainer.round.boundaries import BoundaryStore
from trainer.round.diloco import DiLoCo
from trainer.round.node import NodeRunner, NodeSettings
from trainer.round.recovery import genesis_checkpoint, genesis_hash
from trainer.round.runconfig import RunConfig, StaticConfig
from trainer.round.schedule import RoundReport

SMALL = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32)


def test_attestation_fields_equal_what_was_trained(
    corpus_dir: Path, store_port: int, tmp_path: Path
) -> None:
    key = NodeKey.from_private_key(bytes.fromhex(DEV_KEYS[0][2:]))
    domain = Eip712Domain(chain_id=31337, verifying_contract=DEV_ADDRESS)
    config = RunConfig.make(version=7, inner_steps=4, batch_size=4, mixture=(6000, 4000),
                            trace_interval=3)  # fmt: skip
    settings = NodeSettings(
        run_id=RUN_ID,
        model=SMALL,
        rendezvous_port=store_port,
        membership=MembershipConfig(min_nodes=1, join_window_s=0.0),
        data_path=str(corpus_dir),
        checkpoint_dir=tmp_path,
        max_rounds=2,
        eval_rows=8,
    )
    runner = NodeRunner(settings, Attester(key, domain, RUN_ID, None), StaticConfig(config))
    reports = runner.run()
    assert [r.round for r in reports] == [1, 2]
    att = reports[0].signed.attestation
    spec = ShardSpec.for_node(RUN_ID, 1, key.address, 4 * 4 * 32, (6000, 4000))
    assert att.run_id == RUN_ID and att.round == 1 and att.node == key.address
    assert att.config_version == 7
    assert att.inner_steps == 4 and att.tokens == 4 * 4 * 32
    assert att.data_shard == spec.id
    assert att.base_checkpoint == genesis_hash(SMALL, 0)
    assert att.result_checkpoint == CheckpointDir(tmp_path).load(1).weights_hash
    assert reports[1].signed.attestation.base_checkpoint == att.result_checkpoint
    assert verify_attestation(att, domain, reports[0].signed.signature) == key.address

    # An independent replay of round 1 (what an auditor does) reproduces the commitment.
    model = GPT(SMALL)
    replay = DiLoCo(model, genesis_checkpoint(SMALL, 0).to_state())
    rows = Corpus.from_folder(corpus_dir).shard_rows(spec, SMALL.seq_len)
    local = replay.train_local(rows, config.settings)  # the node's threads: the process's
    assert hash_state_dict(local.commitment()) == att.pseudo_gradient
    # ... and its trace: boundaries after 0, 3 and 4 steps, the root the node signed and kept
    assert local.trace is not None and [b.step for b in local.trace.boundaries] == [0, 3, 4]
    assert local.trace_root == att.trace_root
    store = BoundaryStore(tmp_path)
    assert store.rounds() == [1, 2] and store.trace(1).root == att.trace_root
    served = store.serve(1, 1)
    state = decode_blob(served.blob, max_bytes=len(served.blob))
    check_served(att.trace_root, 1, 3, state, served.boundary.sketch_hash, served.proof)


DEV_ADDRESS = NodeKey.from_private_key(bytes.fromhex(DEV_KEYS[4][2:])).address


def test_a_ledger_outage_keeps_attestations_for_later_instead_of_stopping() -> None:
    import torch

    from trainer.network.ledger_client import LedgerClient, RetryPolicy
    from trainer.round.attest import WorkRecord

    key = NodeKey.from_private_key(bytes.fromhex(DEV_KEYS[1][2:]))
    domain = Eip712Domain(chain_id=31337, verifying_contract=DEV_ADDRESS)
    dead = LedgerClient("http://127.0.0.1:9", retry=RetryPolicy(attempts=1))
    attester = Attester(key, domain, RUN_ID, dead)
    work = WorkRecord(1, 0, bytes(32), {"w": torch.ones(3)}, bytes(32), 1, 32, bytes(32), bytes(32))
    signed = attester.publish(work, [key.address])
    assert signed.ledger_id is None
    assert [p.attestation.round for p in attester.backlog] == [1]
    attester.publish(WorkRecord(2, 0, bytes(32), {"w": torch.ones(3)}, bytes(32), 1, 32,
                                bytes(32), bytes(32)), [key.address])  # fmt: skip
    assert [p.attestation.round for p in attester.backlog] == [1, 2], "kept in round order"


def test_a_work_record_carries_the_attestations_fields_less_the_attesters() -> None:
    """WorkRecord is written out (its pseudo-gradient is tensors); its fields are the spec's."""
    assert tuple(f.name for f in fields(WorkRecord)) == WORK_FIELDS
    assert tuple(a for a in ATTESTATION_ATTRS if a not in ("run_id", "node")) == WORK_FIELDS


def test_a_node_without_a_checkpoint_folder_still_serves_the_trace_it_signed(
    corpus_dir: Path, store_port: int
) -> None:
    """The traceRoot a node signs must be servable when the audit asks (else it is failed as
    withholding): with no checkpoint folder the boundaries live in a scratch folder while the node
    runs, removed when it stops."""
    key = NodeKey.from_private_key(bytes.fromhex(DEV_KEYS[0][2:]))
    domain = Eip712Domain(chain_id=31337, verifying_contract=DEV_ADDRESS)
    config = RunConfig.make(inner_steps=4, batch_size=4, trace_interval=2)
    settings = NodeSettings(
        run_id=RUN_ID, model=SMALL, rendezvous_port=store_port,
        membership=MembershipConfig(min_nodes=1, join_window_s=0.0),
        data_path=str(corpus_dir), checkpoint_dir=None, max_rounds=1, eval_rows=8,
    )  # fmt: skip
    served: list[bool] = []

    def on_round(report: RoundReport) -> None:
        store = runner.boundaries
        assert store is not None
        att = report.signed.attestation
        boundary = store.serve(att.round, 1)
        state = decode_blob(boundary.blob, max_bytes=len(boundary.blob))
        check_served(att.trace_root, 1, 2, state, boundary.boundary.sketch_hash, boundary.proof)
        served.append(True)

    runner = NodeRunner(settings, Attester(key, domain, RUN_ID, None), StaticConfig(config),
                        on_round=on_round)  # fmt: skip
    assert runner.boundaries is not None
    scratch = runner.boundaries.root
    runner.run()
    assert served == [True]
    assert not scratch.exists(), "the scratch folder outlived the node"
