"""F13: the work a node declares sizes what the ledger builds to judge it (the shard's rows for
the usefulness test, the first batch for the probe, the replay's batch). Before, ``tokens`` had
only to be a multiple of ``innerSteps``: 2^24 tokens took the ledger's process to 23 GB. Now
level 1 fails tokens beyond innerSteps x batch x seq_len before any row is built, and the
scorers read only the rows they use, whatever the declaration."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from bench.harness.nodes import attestation, h
from ledger.core.config import Settings
from ledger.core.models import Attestation
from ledger.main import create_app
from ledger.service import Ledger
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body, tick_until


@pytest.fixture
def ledger(
    settings_for: Callable[..., Settings], db_url: str, request: pytest.FixtureRequest
) -> Iterator[Ledger]:
    overrides = {"usefulness_model": "tiny", **getattr(request, "param", {})}
    service = Ledger(settings_for(db_url, **overrides))
    yield service
    service.stop()


@pytest.fixture
def client(ledger: Ledger) -> Iterator[TestClient]:
    with TestClient(create_app(ledger=ledger)) as c:
        yield c


def _post(client: Any, node: Any, domain: Any, run: str, *, tokens: int, steps: int) -> Any:
    att = attestation(
        node, run_id=run, round_=1, base=GENESIS, result=h("r"), tokens=tokens, inner_steps=steps
    )
    return client.post("/v1/attestations", json=body(att, node.key, domain, [node.address]))


@pytest.mark.parametrize("ledger", [{"round_deadline_s": 1.0}], indirect=True)
def test_tokens_beyond_the_governed_batch_cannot_be_scored(
    client: Any, ledger: Ledger, started_run: str, nodes: Any, domain: Any
) -> None:
    """F13: with TOKENS_PER_STEP unset (the default), 2^24 tokens over the governed steps passed
    every check (a multiple of innerSteps) and were scored: the usefulness test, the probe and
    the replay built rows for them. Now level 1 fails them (work_mismatch, naming the bound)
    before any row is built; the honest batch is not touched by the bound."""
    cfg = ledger.indexer.snapshot.config
    per_step = ledger.settings.max_tokens_per_step()
    assert cfg is not None and per_step is not None
    steps = cfg.inner_steps
    r = _post(client, nodes[0], domain, started_run, tokens=steps << 24, steps=steps)
    assert r.status_code == 202, r.text  # a member's update stays in the round's outer step
    honest = 4 * per_step // ledger.settings.max_batch_rows  # batch 4, the red team's
    r = _post(client, nodes[1], domain, started_run, tokens=steps * honest, steps=steps)
    assert r.status_code == 202, r.text
    tick_until(ledger, started_run, 1, "final", timeout=30)
    with Session(ledger.engine) as s:
        rows = {a.node: a for a in s.exec(select(Attestation).where(Attestation.round == 1))}
    big, fair = rows[nodes[0].address], rows[nodes[1].address]
    assert not big.verified
    assert f"exceed innerSteps x batch x seqLen = {steps} x {per_step}" in (big.reason or "")
    assert "exceed innerSteps" not in (fair.reason or ""), fair.reason


_MEASURE = """
import json, resource, sys
from reference.data import Corpus, ShardSpec
from reference.usefulness import scoring_rows
corpus = Corpus.stdlib()
spec = ShardSpec.for_node(bytes(32), 1, "0x" + "ab" * 20, int(sys.argv[1]), (5000, 5000))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
own, _ = scoring_rows(corpus, spec, 64, 32)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rows": own.shape[0], "peak_growth_kib": after - before}))
"""


def test_scoring_a_large_declared_shard_reads_only_its_rows() -> None:
    """F13, in a fresh process: the usefulness test's 32 rows of a 2^24-token declared shard.
    Before, the whole shard was built (262,144 rows: peak RSS +330 MiB here); now the 32 rows
    and the shard's row offsets (24 bytes a row)."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(1 << 24)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["rows"] == 32
    assert out["peak_growth_kib"] < 64 << 10, out  # under 64 MiB
