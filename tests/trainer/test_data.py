"""Byte corpora and the deterministic per-node shard."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from protocol.errors import DataError
from reference.data import Corpus, ShardSpec

NODE_A = "0x" + "11" * 20
NODE_B = "0x" + "22" * 20
RUN = bytes(range(32))


def test_folder_corpus_has_one_source_per_subfolder_and_a_held_out_split(corpus_dir: Path) -> None:
    c = Corpus.from_folder(corpus_dir)
    assert [s.name for s in c.sources] == ["a_lib", "b_tests"]
    for s in c.sources:
        assert s.train.numel() > 10_000 and s.eval.numel() > 0
        assert s.train.dtype == torch.uint8


def test_shard_rows_are_deterministic_and_differ_per_node_and_round(corpus_dir: Path) -> None:
    c = Corpus.from_folder(corpus_dir)
    spec = ShardSpec.for_node(RUN, 3, NODE_A, 32 * 40, [5000, 5000])
    again = Corpus.from_folder(corpus_dir).shard_rows(spec, 32)
    rows = c.shard_rows(spec, 32)
    assert rows.shape == (40, 33) and rows.dtype == torch.int64
    assert torch.equal(rows, again)
    other_node = c.shard_rows(ShardSpec.for_node(RUN, 3, NODE_B, 32 * 40, [5000, 5000]), 32)
    other_round = c.shard_rows(ShardSpec.for_node(RUN, 4, NODE_A, 32 * 40, [5000, 5000]), 32)
    assert not torch.equal(rows, other_node) and not torch.equal(rows, other_round)


def test_shard_id_is_sha256_of_its_identity() -> None:
    a = ShardSpec.for_node(RUN, 1, NODE_A, 1024, [7000, 3000])
    assert len(a.id) == 32
    assert (
        a.id
        == ShardSpec.for_node(RUN, 1, NODE_A.upper().replace("0X", "0x"), 1024, (7000, 3000)).id
    )
    assert a.id != ShardSpec.for_node(RUN, 1, NODE_A, 1024, [3000, 7000]).id
    assert a.id != ShardSpec.for_node(RUN, 1, NODE_A, 2048, [7000, 3000]).id


def test_mixture_decides_how_many_rows_each_source_gives(corpus_dir: Path) -> None:
    c = Corpus.from_folder(corpus_dir)
    spec = ShardSpec.for_node(RUN, 1, NODE_A, 32 * 100, [10_000, 0])
    assert spec.rows_per_source(32) == [100, 0]
    assert ShardSpec.for_node(RUN, 1, NODE_A, 32 * 7, [5000, 5000]).rows_per_source(32) == [4, 3]
    only_a = c.shard_rows(spec, 32)
    # every row of an all-source-0 shard is a window of source 0's train stream
    src = bytes(c.sources[0].train.tolist())
    assert all(bytes(row.tolist()) in src for row in only_a[:5].to(torch.uint8))


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"mixture": [5000, 4000]}, "sum to 10000"),
        ({"node_address": "0x1234"}, "address"),
        ({"run_id": b"short"}, "32 bytes"),
        ({"n_tokens": 0}, "positive"),
    ],
)
def test_bad_shard_specs_say_what_is_wrong(kwargs: dict[str, object], needle: str) -> None:
    args: dict[str, object] = {
        "run_id": RUN,
        "round": 1,
        "node_address": NODE_A,
        "n_tokens": 64,
        "mixture": [10_000],
    }
    with pytest.raises(DataError, match=needle):
        ShardSpec.for_node(**(args | kwargs))  # type: ignore[arg-type]


def test_mixture_longer_than_the_corpus_is_refused(corpus_dir: Path) -> None:
    c = Corpus.from_folder(corpus_dir)
    with pytest.raises(DataError, match="only 2 sources"):
        c.shard_rows(ShardSpec.for_node(RUN, 1, NODE_A, 64, [4000, 3000, 3000]), 32)


def test_jsonl_needs_a_text_field_and_parquet_needs_pyarrow(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": "hello world"}\n{"body": "x"}\n')
    with pytest.raises(DataError, match=r"a\.jsonl:2"):
        Corpus.from_folder(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=r"no \.txt"):
        Corpus.from_folder(empty)


def test_default_corpus_is_the_python_stdlib() -> None:
    c = Corpus.stdlib()
    assert [s.name for s in c.sources] == ["stdlib", "stdlib-tests"]
    assert c.sources[0].train.numel() > 1_000_000
    rows = c.eval_rows(64, 10)
    assert rows.shape == (10, 65)
