"""The run's data pinned by content (issue 28, point 4).

Two Pythons' standard libraries differ (1,790 files in one 3.11, 668 in Debian's): the old default
corpus, "the .py files of whatever Python runs coloco", gave honest nodes different rows, and the
replay audit failed them. Here two simulated stdlibs (the shipped snapshot extracted, and a copy
with a changed, a missing and an extra file) show that difference, and that the pinned default
corpus (reference/corpus/stdlib.zip, TrainingConfig.dataRoot) removes it: a node on other data
is refused before it trains, naming the files; the ledger's replay on the pinned bytes passes
honest nodes; the shipped snapshot rebuilds bit for bit; the contract's default root is its root.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from ledger.judge.replay import ReplayInputs, audit, replay_pseudo_gradient
from ledger.judge.usefulness import corpus_of
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.keys import NodeKey
from reference.data import DEFAULT_CORPUS, Corpus, ShardSpec, check_data
from reference.manifest import DataManifest, DataMismatch
from reference.model import GPT, GPTConfig
from reference.settings import TrainingSettings
from tests.ledger.conftest import nodes  # noqa: F401 - pytest fixture
from tests.trainer.test_chain_ledger import RUN, _node
from tools.build_corpus import build

TINY = GPTConfig.preset("tiny")


@pytest.fixture(scope="module")
def stdlibs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two "Pythons": A holds exactly the snapshot's files; B is A with ``os.py`` changed, the
    first ``ctypes`` test gone (a distribution without part of the test suite) and a file more."""
    a, b = tmp_path_factory.mktemp("python-a"), tmp_path_factory.mktemp("python-b")
    with zipfile.ZipFile(DEFAULT_CORPUS) as archive:
        archive.extractall(a)
        archive.extractall(b)
    (b / "os.py").write_bytes((a / "os.py").read_bytes() + b"\n# patched by the distribution\n")
    (b / "ctypes" / "test" / "test_anon.py").unlink()
    (b / "_sysconfigdata_vendor.py").write_text("build_time_vars = {}\n")
    return a, b


def _rows(corpus: Corpus, node: str = "0x" + "11" * 20) -> torch.Tensor:
    spec = ShardSpec.for_node(RUN, 3, node, 16 * TINY.seq_len, (7000, 3000))
    return corpus.shard_rows(spec, TINY.seq_len)


def test_pinned_default_corpus_gives_two_pythons_the_same_bytes(stdlibs: tuple[Path, Path]) -> None:
    a, b = stdlibs
    local_a, local_b = Corpus.from_stdlib(a), Corpus.from_stdlib(b)
    # the old default: each Python's own stdlib -> different data, different rows for one shard
    assert local_a.root != local_b.root
    assert not torch.equal(_rows(local_a), _rows(local_b))
    # the pinned default does not read the local stdlib: the snapshot's bytes on every Python
    pinned = Corpus.stdlib()
    assert pinned.root == local_a.root  # A is the snapshot's Python: the same files, same bytes
    assert torch.equal(_rows(pinned), _rows(local_a))
    assert torch.equal(pinned.eval_rows(TINY.seq_len, 8), local_a.eval_rows(TINY.seq_len, 8))
    check_data(pinned, pinned.root, what="a node's data")  # accepted


def test_fingerprint_mismatch_names_the_files_and_both_roots(stdlibs: tuple[Path, Path]) -> None:
    _, b = stdlibs
    run_root = Corpus.stdlib().root
    with pytest.raises(DataMismatch) as caught:
        check_data(Corpus.from_stdlib(b), run_root, what="this node's data")
    msg = caught.value.message
    assert f"0x{run_root.hex()}" in msg
    assert f"0x{Corpus.from_stdlib(b).root.hex()}" in msg
    assert "1 missing (ctypes/test/test_anon.py)" in msg
    assert "1 extra (_sysconfigdata_vendor.py)" in msg
    assert "1 changed (os.py)" in msg


def test_fingerprint_manifest_root_covers_paths_and_bytes() -> None:
    base = DataManifest.of([("a.txt", b"x"), ("b.txt", b"y")])
    assert base.root == DataManifest.of([("b.txt", b"y"), ("a.txt", b"x")]).root  # order-free
    assert base.root != DataManifest.of([("a.txt", b"x"), ("c.txt", b"y")]).root  # renamed
    assert base.root != DataManifest.of([("a.txt", b"x"), ("b.txt", b"z")]).root  # edited
    assert DataManifest.from_json(base.to_json()) == base
    with pytest.raises(DataMismatch, match=r"1 changed \(b.txt\)"):
        from reference.manifest import check_root

        other = DataManifest.of([("a.txt", b"x"), ("b.txt", b"z")])
        check_root(other, base.root, what="data", expected=base)


def test_pinned_snapshot_rebuilds_bit_for_bit(stdlibs: tuple[Path, Path], tmp_path: Path) -> None:
    """tools/build_corpus.py over the snapshot's own files gives the shipped file, byte for
    byte: the default corpus is reproducible, not a blob nobody can regenerate."""
    a, _ = stdlibs
    out = tmp_path / "stdlib.zip"
    root = build(a, out)
    assert out.read_bytes() == DEFAULT_CORPUS.read_bytes()
    assert root == Corpus.stdlib().root
    assert DEFAULT_CORPUS.stat().st_size < 5_000_000  # a few MB shipped in the package


@pytest.mark.anvil
def test_pinned_root_is_what_a_fresh_run_governs(
    chain: AnvilProcess, deployment: Deployment
) -> None:
    view = TrainingSettings.read(ChainClient(chain.rpc_url, deployment))
    assert bytes(view.data_root) == Corpus.stdlib().root


@pytest.mark.anvil
def test_fingerprint_node_on_other_data_is_refused_before_training(
    chain: AnvilProcess,
    deployment: Deployment,
    nodes: list[Any],  # noqa: F811
    corpus_dir: Path,
    store_port: int,
) -> None:
    """The run pins the default corpus (a fresh deployment); a node pointed at another folder
    is refused by ``run()`` before it joins or trains a round, with both roots in the message."""
    key = NodeKey.from_private_key(nodes[0].key)
    runner = _node(chain, deployment, key, corpus_dir, store_port, None, rounds=1)
    with pytest.raises(DataMismatch, match=r"this node's data .* is not the run's data") as caught:
        runner.run()
    assert f"0x{Corpus.stdlib().root.hex()}" in caught.value.message
    assert f"0x{Corpus.from_folder(corpus_dir).root.hex()}" in caught.value.message
    assert runner.diloco is None and runner.state_round == -1  # no round spent
    assert not runner.rdv.store.check(["members/1/0/n"])  # never joined round 1


def test_pinned_replay_passes_honest_nodes_of_two_pythons(
    stdlibs: tuple[Path, Path], corpus_dir: Path
) -> None:
    """Real genesis weights, each node's inner steps on its data, the ledger's replay audit on
    the run's pinned corpus (what `coloco audit` and the ledger run): the two pinned nodes (on
    "Python A" and "Python B", both on the shipped snapshot) pass; a node that trained on its own
    stdlib (the old default, Python B) fails, which is why a node on other data is refused before
    it trains; and an auditor whose data is not the run's refuses rather than flag anyone."""
    _, b = stdlibs
    run_root = Corpus.stdlib().root
    base = {n: p.detach().clone() for n, p in GPT(TINY, seed=0).named_parameters()}
    inputs = ReplayInputs(
        run_id=RUN, round=1, node="0x" + "22" * 20, tokens=3 * 4 * TINY.seq_len, inner_steps=3,
        inner_lr=3e-3, mixture=(10_000,), preset="tiny", data_root=run_root,
    )  # fmt: skip
    ledger_corpus = corpus_of(None, run_root)
    for node_corpus in (Corpus.stdlib(), Corpus.stdlib()):  # the pinned bytes, whatever Python
        honest = replay_pseudo_gradient(base, inputs, node_corpus)
        assert audit(base, honest, inputs, ledger_corpus, tolerance=1e-6).passed
    unpinned = replay_pseudo_gradient(base, inputs, Corpus.from_stdlib(b))
    verdict = audit(base, unpinned, inputs, ledger_corpus, tolerance=1e-2)
    assert not verdict.passed and verdict.rel_error > 0.05
    with pytest.raises(DataMismatch, match="the ledger's corpus"):
        corpus_of(corpus_dir, run_root)  # not the run's data: refused, never replayed
