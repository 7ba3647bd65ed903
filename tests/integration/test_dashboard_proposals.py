"""The dashboard's proposals page on a real devnet: a Queued proposal that the Timelock could not
execute says so and why (each action run as an eth_call from the Timelock), with its action
decoded; one that could is not marked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coloco_cli.main import app
from ledger.chain.client import LedgerChain
from ledger.dashboard import routes, views
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from tests.integration.conftest import Holder, cli_ok

pytestmark = [pytest.mark.integration, pytest.mark.anvil]

runner = CliRunner()


def _queued(chain: AnvilProcess, key: str, *sets: str) -> str:
    args = [a for s in sets for a in ("--set", s)]
    result = runner.invoke(
        app, ["gov", "propose", *args, "--force", "--private-key", key, "--json"]
    )
    assert result.exit_code == 0, (result.output, result.exception)
    pid = str(json.loads(result.stdout)["proposal_id"])
    chain.increase_time(2)
    cli_ok("gov", "vote", pid, "--support", "for", "--private-key", key)
    return pid


def test_a_queued_proposal_that_cannot_execute_says_why(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    alice, _ = holders
    bad = _queued(chain, alice.key, "inner-steps=0")
    good = _queued(chain, alice.key, "inner-steps=31")
    chain.increase_time(21)
    for pid in (bad, good):
        cli_ok("gov", "queue", pid, "--private-key", alice.key)
    data = views.proposals(LedgerChain(chain.rpc_url, deployment, None))
    shown = {p["proposal_id"]: p for p in data["proposals"]}
    assert shown[bad]["state"] == "Queued" and not shown[bad]["final"]
    assert shown[bad]["actions"][0].startswith("TrainingConfig.setInnerLoop(inner-steps=0, "), shown
    assert "InvalidInnerSteps" in str(shown[bad]["blocked"]), shown[bad]
    assert shown[good]["state"] == "Queued" and shown[good]["blocked"] is None, shown[good]
    html = routes._env.get_template("proposals.html").render(root="", **data)
    assert "cannot execute: InvalidInnerSteps" in html
    assert html.count("cannot execute:") == 1
