"""Schemathesis against the ledger's OpenAPI schema, on a real server: no 500, no schema violation.

Every operation gets generated requests (valid and invalid); each answer must not be a server
error, and every documented answer must match its schema. Quick mode (CI) keeps the example
count small; `make test-full` runs more.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from ledger.core.config import Settings
from ledger.main import create_app
from ledger.service import Ledger
from protocol.devnet import AnvilProcess, free_port
from tests.conftest import QUICK

EXAMPLES = 8 if QUICK else 60


@pytest.fixture(scope="module")
def ledger_url(
    anvil: AnvilProcess, deployment_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    work = tmp_path_factory.mktemp("schema")
    ledger = Ledger(
        Settings(
            _env_file=None,  # type: ignore[call-arg]
            environment="test",
            rpc_url=anvil.rpc_url,
            deployment=deployment_file,
            committer_private_key=anvil.accounts[1][1],
            database_url=f"sqlite:///{work / 'ledger.db'}",
            blob_dir=work / "blobs",
            admin_token="schema-admin-token-0123456789",
            run_background=False,
        )
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(ledger=ledger), host="127.0.0.1", port=port, log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        ledger.stop()


def test_api_conforms_to_its_schema(ledger_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{ledger_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10, [op.label for op in operations]
    failures: list[str] = []
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case: Any) -> None:
            case.call_and_validate(checks=[not_a_server_error, response_schema_conformance])

        try:
            check()
        except Exception as exc:  # collect every operation's failure, then report them all
            failures.append(f"{operation.label}: {str(exc)[:1500]}")
    assert failures == [], "\n\n".join(failures)
