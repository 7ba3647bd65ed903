"""F13: the work a node declares sizes what the ledger builds to judge it (the shard's rows for
the usefulness test, the first batch for the probe, the replay's batch). Before, ``tokens`` had
only to be a multiple of ``innerSteps``: 2^24 tokens took the ledger's process to 23 GB. Now
intake refuses tokens beyond innerSteps x batch x seq_len, and the scorers read only the rows
they use, whatever the declaration."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from bench.harness.nodes import attestation, h
from ledger.core.config import Settings
from ledger.main import create_app
from ledger.service import Ledger
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body


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


def test_tokens_beyond_the_governed_batch_cannot_be_declared(
    client: Any, ledger: Ledger, started_run: str, nodes: Any, domain: Any
) -> None:
    """F13: with TOKENS_PER_STEP unset (the default), 2^24 tokens over the governed steps were
    accepted (a multiple of innerSteps); now intake refuses them, naming the bound, and the honest
    batch passes."""
    cfg = ledger.indexer.snapshot.config
    per_step = ledger.settings.max_tokens_per_step()
    assert cfg is not None and per_step is not None
    steps = cfg.inner_steps
    r = _post(client, nodes[0], domain, started_run, tokens=steps << 24, steps=steps)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "work_too_large"
    assert f"innerSteps x batch x seqLen = {steps} x {per_step}" in error["message"]
    # an attested innerSteps above the governed one does not raise the bound
    r = _post(client, nodes[1], domain, started_run, tokens=(steps + 1) * per_step, steps=steps + 1)
    assert r.status_code == 422 and r.json()["error"]["code"] == "work_too_large"
    honest = 4 * per_step // ledger.settings.max_batch_rows  # batch 4, the red team's
    r = _post(client, nodes[2], domain, started_run, tokens=steps * honest, steps=steps)
    assert r.status_code == 202, r.text


@pytest.mark.parametrize("ledger", [{"tokens_per_step": 256}], indirect=True)
def test_a_governed_tokens_per_step_is_the_bound(
    client: Any, ledger: Ledger, started_run: str, nodes: Any, domain: Any
) -> None:
    """F13: with TOKENS_PER_STEP set, tokens above innerSteps x it are refused at intake."""
    cfg = ledger.indexer.snapshot.config
    assert cfg is not None
    r = _post(
        client, nodes[0], domain, started_run, tokens=cfg.inner_steps * 257, steps=cfg.inner_steps
    )
    assert (
        r.status_code == 422 and "= " + str(cfg.inner_steps * 256) in r.json()["error"]["message"]
    )
    r = _post(
        client, nodes[0], domain, started_run, tokens=cfg.inner_steps * 256, steps=cfg.inner_steps
    )
    assert r.status_code == 202, r.text


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
