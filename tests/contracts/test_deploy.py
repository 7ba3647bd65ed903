"""The deployment path against a real anvil: forge script, roles, JSON, ABIs, one round commit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from web3 import Web3

from protocol.abi_struct import returned
from protocol.deploy import deploy
from protocol.deployment import CONTRACT_NAMES, Deployment, abi
from protocol.devnet import AnvilProcess
from protocol.errors import DeploymentError

ZERO_ROLE = b"\x00" * 32


def _contract(w3: Web3, dep: Deployment, name: str):  # type: ignore[no-untyped-def]
    return w3.eth.contract(address=dep.address(name), abi=abi(name))


def test_deploy_writes_json_and_reads_back(deployment: Deployment, anvil: AnvilProcess) -> None:
    w3 = anvil.w3
    assert deployment.chain_id == anvil.chain_id
    assert set(CONTRACT_NAMES) <= set(deployment.contracts)
    for name in CONTRACT_NAMES:
        assert len(w3.eth.get_code(deployment.address(name))) > 0, name
    assert 0 < deployment.deployment_block <= anvil.block_number()
    assert deployment.governance == {
        "voting_delay": 1,
        "voting_period": 20,
        "vote_extension": 0,
        "quorum_fraction": 4,
        "timelock_delay": 1,
        "dispute_window": 2,
        "slash_dispute_window": 10,
        "unbonding_delay": 60,
    }
    assert deployment.guardian == deployment.deployer  # the devnet default, recorded
    assert deployment.treasury not in (None, deployment.address("TimelockController"))
    config = _contract(w3, deployment, "TrainingConfig")
    assert config.functions.version().call() == 1
    cfg = returned("TrainingConfig", "current", config.functions.current().call())
    assert cfg["innerSteps"] == 50
    assert cfg["traceInterval"] == 5
    assert cfg["minStake"] == 10**18
    assert list(cfg["dataMixtureBps"]) == [10_000]
    assert config.functions.owner().call() == deployment.address("TimelockController")


def test_deploy_wires_roles(deployment: Deployment, anvil: AnvilProcess) -> None:
    w3 = anvil.w3
    ledger = _contract(w3, deployment, "ContributionLedger")
    token = _contract(w3, deployment, "ModelShareToken")
    stake = _contract(w3, deployment, "StakeManager")
    timelock = _contract(w3, deployment, "TimelockController")
    tl = deployment.address("TimelockController")
    gov = deployment.address("ModelGovernor")
    deployer = deployment.deployer
    committer_role = ledger.functions.COMMITTER_ROLE().call()
    assert ledger.functions.hasRole(committer_role, deployment.committer).call()
    assert not ledger.functions.hasRole(committer_role, deployer).call()
    assert ledger.functions.hasRole(ZERO_ROLE, tl).call()
    assert not ledger.functions.hasRole(ZERO_ROLE, deployer).call()
    assert token.functions.MINTER().call() == deployment.address("RewardDistributor")
    assert token.functions.hasRole(token.functions.GRANTER_ROLE().call(), tl).call()
    assert not token.functions.hasRole(ZERO_ROLE, deployer).call()
    assert stake.functions.hasRole(stake.functions.SLASHER_ROLE().call(), tl).call()
    assert stake.functions.treasury().call() == deployment.treasury
    assert stake.functions.treasury().call() not in (tl, gov)
    # one guardian for every pausable contract, RunFunding included (not only COLOCO_GUARDIAN)
    for name in (
        "ContributionLedger",
        "RewardDistributor",
        "StakeManager",
        "RunFunding",
        "ComputeLeases",
    ):
        c = _contract(w3, deployment, name)
        guardian_role = c.functions.GUARDIAN_ROLE().call()
        assert c.functions.hasRole(guardian_role, deployment.guardian).call(), name
        assert c.functions.hasRole(ZERO_ROLE, tl).call(), name
        assert not c.functions.hasRole(ZERO_ROLE, deployer).call(), name
    assert timelock.functions.hasRole(timelock.functions.PROPOSER_ROLE().call(), gov).call()
    executor = timelock.functions.EXECUTOR_ROLE().call()
    assert timelock.functions.hasRole(executor, "0x" + "00" * 20).call()
    assert not timelock.functions.hasRole(ZERO_ROLE, deployer).call()
    governor = _contract(w3, deployment, "ModelGovernor")
    assert governor.functions.votingPeriod().call() == 20
    assert governor.functions.token().call() == deployment.address("ModelShareToken")


def test_committer_commits_a_round(deployment: Deployment, chain: AnvilProcess) -> None:
    w3 = chain.w3
    ledger = _contract(w3, deployment, "ContributionLedger")
    key = next(k for a, k in chain.accounts if a == deployment.committer)
    sender = Account.from_key(key)
    run_id = b"\x01" * 32
    for rnd, root in ((0, b"\x00" * 32), (1, b"\x0a" * 32)):
        tx = ledger.functions.commitRound(
            run_id, rnd, root, bytes([rnd + 1]) * 32, 1000, b"\x0b" * 32, rnd * 10**18
        ).build_transaction(
            {"from": sender.address, "nonce": w3.eth.get_transaction_count(sender.address)}
        )
        signed = sender.sign_transaction(tx)
        receipt = w3.eth.wait_for_transaction_receipt(
            w3.eth.send_raw_transaction(signed.raw_transaction)
        )
        assert receipt["status"] == 1
    assert ledger.functions.lastRound(run_id).call() == 1
    index, finalized_at, revoked, budget = ledger.functions.rootInfo(b"\x0a" * 32).call()
    assert (index, revoked, budget) == (1, False, 10**18)
    assert finalized_at == w3.eth.get_block("latest")["timestamp"] + 2
    assert ledger.functions.checkpointOf(run_id, 0).call() == b"\x01" * 32
    events = ledger.events.RoundCommitted().get_logs(from_block=receipt["blockNumber"])
    assert events[0]["args"]["totalWork"] == 1000


def test_deploy_with_custom_treasury_and_params(chain: AnvilProcess, tmp_path: Path) -> None:
    treasury = chain.accounts[5][0]
    out = tmp_path / "nested" / "dep.json"
    dep = deploy(
        chain.rpc_url,
        chain.accounts[2][1],
        committer=chain.accounts[3][0],
        treasury=treasury,
        out_path=out,
        voting_period=7,
        quorum_fraction=10,
        initial_inner_steps=17,
    )
    assert Deployment.load(out) == dep
    assert json.loads(out.read_text())["governance"]["voting_period"] == 7
    stake = _contract(chain.w3, dep, "StakeManager")
    assert stake.functions.treasury().call() == treasury
    governor = _contract(chain.w3, dep, "ModelGovernor")
    assert governor.functions.quorumNumerator().call() == 10
    config = _contract(chain.w3, dep, "TrainingConfig")
    assert config.functions.current().call()[0] == 17  # genesis H set by the deployment...
    assert config.functions.version().call() == 2
    timelock = dep.address("TimelockController")
    assert config.functions.owner().call() == timelock  # ...and then only governance changes it


def test_production_profile_needs_explicit_roles(tmp_path: Path) -> None:
    with pytest.raises(DeploymentError, match="explicit treasury"):
        deploy(
            "http://127.0.0.1:1",
            "0x" + "11" * 32,
            committer="0x" + "22" * 20,
            guardian="0x" + "33" * 20,
            out_path=tmp_path / "x",
            profile="production",
        )


def _deploy_production(chain: AnvilProcess, out_path: Path, **overrides: Any) -> Deployment:
    """The production profile deployed by account 2 (committer 3, treasury 5, guardian 6)."""
    return deploy(
        chain.rpc_url,
        chain.accounts[2][1],
        committer=chain.accounts[3][0],
        treasury=chain.accounts[5][0],
        guardian=chain.accounts[6][0],
        out_path=out_path,
        profile="production",
        **overrides,
    )


def test_production_profile_refuses_a_rushable_governor(
    chain: AnvilProcess, tmp_path: Path
) -> None:
    with pytest.raises(DeploymentError, match="ProductionBound"):
        _deploy_production(chain, tmp_path / "x.json", voting_period=20)


def test_production_profile_deploys_hours_and_days(chain: AnvilProcess, tmp_path: Path) -> None:
    dep = _deploy_production(chain, tmp_path / "prod.json")
    governor = _contract(chain.w3, dep, "ModelGovernor")
    assert governor.functions.proposalThreshold().call() > 0
    assert governor.functions.votingDelay().call() >= 3600
    assert governor.functions.lateQuorumVoteExtension().call() >= 3600
    assert governor.functions.CLOCK_MODE().call() == "mode=timestamp"
    timelock = _contract(chain.w3, dep, "TimelockController")
    assert timelock.functions.getMinDelay().call() >= 86400
    stake = _contract(chain.w3, dep, "StakeManager")
    latency = governor.functions.governanceLatency().call()
    assert stake.functions.params().call()[0] >= latency + dep.governance["slash_dispute_window"]
    assert dep.guardian == chain.accounts[6][0] and dep.treasury == chain.accounts[5][0]
    funding = _contract(chain.w3, dep, "RunFunding")
    guardian_role = funding.functions.GUARDIAN_ROLE().call()
    assert funding.functions.hasRole(guardian_role, dep.guardian).call()
    # F2: backers' ETH waits a day before a root pays (was 2 s), capital vests over 30 days
    # (was 60 s), and one root adds at most 10 % of a run's deposits
    assert funding.functions.disputeWindow().call() >= 86400
    assert funding.functions.vestingPeriod().call() >= 86400
    assert funding.functions.maxEthPerRootBps().call() <= 1000


def test_production_profile_refuses_a_two_second_funding_window(
    chain: AnvilProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F2: the production profile's RunFunding dispute window is at least a day."""
    monkeypatch.setenv("COLOCO_FUNDING_DISPUTE_WINDOW", "2")
    with pytest.raises(DeploymentError, match="ProductionBound"):
        _deploy_production(chain, tmp_path / "x.json")


def test_devnet_profile_refused_off_anvil_chain_id(tmp_path: Path) -> None:
    other = AnvilProcess.start(tmp_path / "anvil", chain_id=8453, accounts=2)
    try:
        with pytest.raises(DeploymentError, match="DevnetProfileOffAnvil"):
            deploy(
                other.rpc_url,
                other.accounts[0][1],
                committer=other.accounts[1][0],
                out_path=tmp_path / "x.json",
            )
    finally:
        other.stop()


def test_deploy_rejects_zero_initial_inner_steps(tmp_path: Path) -> None:
    with pytest.raises(DeploymentError, match="initial_inner_steps"):
        deploy(
            "http://127.0.0.1:1",
            "0x" + "11" * 32,
            committer="0x" + "22" * 20,
            out_path=tmp_path / "x",
            initial_inner_steps=0,
        )


def test_deploy_reports_forge_failure(tmp_path: Path) -> None:
    key = "0x" + "11" * 32
    with pytest.raises(DeploymentError, match="forge script"):
        deploy("http://127.0.0.1:1", key, committer="0x" + "22" * 20, out_path=tmp_path / "d.json")


def test_deploy_rejects_bad_committer(tmp_path: Path) -> None:
    with pytest.raises(DeploymentError, match="committer"):
        deploy("http://127.0.0.1:1", "0x" + "11" * 32, committer="bob", out_path=tmp_path / "x")


def test_load_names_missing_key(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"chain_id": 1}))
    with pytest.raises(DeploymentError, match="deployment_block"):
        Deployment.load(path)
    with pytest.raises(DeploymentError, match="no deployment JSON"):
        Deployment.load(tmp_path / "absent.json")


def test_abi_of_unknown_contract_says_what_to_do() -> None:
    assert any(item.get("name") == "commitRound" for item in abi("ContributionLedger"))
    with pytest.raises(DeploymentError, match="forge build"):
        abi("NoSuchContract")


def test_deploys_side_by_side_never_see_a_half_written_compilation_cache(
    anvil: AnvilProcess, tmp_path: Path
) -> None:
    """Four deploys at once (as test workers and devnets run) while a reader keeps parsing forge's
    shared compilation cache: every deploy succeeds and the shared file is whole at every read.

    `forge script` rewrites its cache in place; before each deploy had its own copy, a deploy that
    read another's half-written file recompiled everything and was killed as stalled (CI, stop 35:
    139 errors)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from protocol.deploy import _SHARED_CACHE

    committer = anvil.accounts[1][0]
    done = threading.Event()
    reads: list[str] = []

    def watch() -> None:
        while not done.is_set():
            try:
                json.loads(_SHARED_CACHE.read_bytes())
                reads.append("whole")
            except FileNotFoundError:
                pass
            except ValueError as exc:
                reads.append(f"half-written: {exc}")

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            deployed = list(
                pool.map(
                    lambda i: deploy(
                        anvil.rpc_url,
                        anvil.accounts[5 + i][1],
                        committer=committer,
                        out_path=tmp_path / f"deployment{i}.json",
                    ),
                    range(4),
                )
            )
    finally:
        done.set()
        watcher.join()
    assert len({d.address("ContributionLedger") for d in deployed}) == 4
    assert reads and set(reads) == {"whole"}, [r for r in reads if r != "whole"][:3]
