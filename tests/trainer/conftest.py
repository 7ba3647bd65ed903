"""Trainer fixtures: a small two-source corpus folder and a rendezvous store hosted by the test."""

from __future__ import annotations

import sysconfig
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from protocol.devnet import free_port
from protocol.keys import NodeKey
from trainer.network.coordination.board import Board
from trainer.network.coordination.registry import AnyKeyRegistry
from trainer.network.coordination.store import FailoverStore
from trainer.round.node import offline_domain


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two sources (`a_lib`, `b_tests`) of real Python source as .txt, ~40 files, ~600 KB."""
    root = tmp_path_factory.mktemp("corpus")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    picks = {
        "a_lib": sorted(stdlib.glob("*.py"))[:30],
        "b_tests": sorted((stdlib / "unittest").glob("*.py"))[:12],
    }
    for source, files in picks.items():
        (root / source).mkdir()
        for f in files:
            (root / source / (f.stem + ".txt")).write_bytes(f.read_bytes())
    return root


def _hosted_store() -> Iterator[int]:
    port = free_port()
    store = dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60)
    )
    yield port
    del store


@pytest.fixture
def store_port() -> Iterator[int]:
    """A TCPStore hosted by the test process (the coordinator); nodes connect as clients."""
    yield from _hosted_store()


@pytest.fixture
def second_store() -> Iterator[int]:
    """Another coordinator store, for a second run in the same test."""
    yield from _hosted_store()


COORDINATION_RUN = bytes.fromhex("cd" * 32)


@pytest.fixture
def store() -> Iterator[FailoverStore]:
    """A rendezvous store hosted in the test process, as the coordination board sees it."""
    s = FailoverStore(("127.0.0.1", free_port()), host=True)
    yield s
    del s


@pytest.fixture
def board_of(store: FailoverStore) -> Callable[[int], Board]:
    """``board_of(seed)``: a node with key ``bytes([seed]) * 32`` posting and reading on the store
    (any signed key admitted, as in an offline run)."""

    def make(seed: int) -> Board:
        key = NodeKey.from_private_key(bytes([seed]) * 32)
        domain = offline_domain(COORDINATION_RUN)
        return Board(store, key, domain, COORDINATION_RUN, AnyKeyRegistry())

    return make
