"""ChainClient against a real anvil with the real contracts: reads, writes, reverts, retries."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests
from eth_account import Account

from protocol.chain import ChainClient, RetryPolicy
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.errors import (
    ChainError,
    ConfigError,
    ContractRevertError,
    DeploymentError,
    RpcUnavailableError,
)
from protocol.signing import address_of_private_key
from protocol.types import Address, Bytes32, RoundNumber, RunId
from reference.settings import TrainingSettings
from tests.vectors.generate import vector_address, vector_bytes32, vector_key

pytestmark = pytest.mark.anvil

FAST_RETRY = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.02)
RUN = RunId(vector_bytes32("chain-test/run"))


def h(label: str) -> Bytes32:
    return Bytes32(vector_bytes32(label))


@pytest.fixture
def committer(chain: AnvilProcess, deployment: Deployment) -> ChainClient:
    key = dict(chain.accounts)[deployment.committer]
    return ChainClient(chain.rpc_url, deployment, Account.from_key(key), retry=FAST_RETRY)


def commit(client: ChainClient, round_: int, run: RunId = RUN) -> Any:
    return client.commit_round(
        run,
        RoundNumber(round_),
        rewards_root=h(f"root/{round_}"),
        checkpoint_hash=h(f"ckpt/{round_}"),
        total_work=1000 * round_,
        attestations_root=h(f"atts/{round_}"),
    )


def test_typed_reads(committer: ChainClient) -> None:
    config = TrainingSettings.read(committer)
    assert config.version >= 1
    assert config.inner_steps > 0
    assert sum(config.data_mixture_bps) == 10000
    assert config.wire_format.label in ("fp32", "bf16", "int8")
    stranger = vector_address("chain-test/stranger")
    info = committer.node_info(stranger)
    assert not info.registered and info.staked == 0
    assert committer.is_active(stranger) is False
    assert committer.last_round(RUN) == 0 and committer.has_committed(RUN) is False
    assert committer.block_number() >= 1
    domain = committer.attestation_domain()
    assert domain.verifying_contract == committer.deployment.address("ContributionLedger")


def test_commit_round_then_read_back(committer: ChainClient) -> None:
    receipt = commit(committer, 0)
    assert receipt["status"] == 1
    receipt = commit(committer, 1)
    assert committer.last_round(RUN) == 1
    assert committer.has_committed(RUN)
    assert committer.checkpoint_of(RUN, RoundNumber(1)) == h("ckpt/1")
    assert committer.checkpoint_of(RUN, RoundNumber(0)) == h("ckpt/0")
    status = committer.root_status(h("root/1"))
    assert status.index > 0 and not status.revoked
    now = int(committer.w3.eth.get_block("latest")["timestamp"])
    assert status.finalized_at == now + committer.dispute_window()
    assert status.state(now) == "pending"
    assert status.state(status.finalized_at) == "claimable"
    events = (
        committer.contract("ContributionLedger").events.RoundCommitted().process_receipt(receipt)
    )
    assert [e["args"]["round"] for e in events] == [1]


def test_custom_error_reverts_are_decoded(committer: ChainClient, chain: AnvilProcess) -> None:
    with pytest.raises(ContractRevertError) as info:
        commit(committer, 5)
    assert info.value.error_name == "GenesisNotZero"
    commit(committer, 0)
    commit(committer, 5)
    with pytest.raises(ContractRevertError) as info:
        commit(committer, 5)
    assert info.value.error_name == "RoundNotIncreasing"
    assert info.value.error_args == (RUN, 5, 5)
    assert "RoundNotIncreasing(runId=0x" in info.value.message
    with pytest.raises(ContractRevertError) as info:
        committer.commit_round(
            RUN, RoundNumber(6), rewards_root=h("r"), checkpoint_hash=Bytes32(bytes(32)),
            total_work=0, attestations_root=h("a"),
        )  # fmt: skip
    assert info.value.error_name == "ZeroCheckpoint"
    outsider_key = chain.accounts[7][1]
    outsider = ChainClient(chain.rpc_url, committer.deployment, Account.from_key(outsider_key))
    with pytest.raises(ContractRevertError) as info:
        commit(outsider, 9)
    assert info.value.error_name == "AccessControlUnauthorizedAccount"
    assert info.value.error_args[0] == chain.accounts[7][0]
    role = committer.call("ContributionLedger", "COMMITTER_ROLE")
    assert info.value.error_args[1] == bytes(role)


def test_view_revert_is_decoded(committer: ChainClient) -> None:
    with pytest.raises(ContractRevertError) as info:
        committer.claim(vector_address("claimer"), 10, [h("not a proof")])
    assert info.value.error_name == "InvalidProof"


def test_an_unknown_wire_format_on_chain_is_an_error_naming_it(
    chain: AnvilProcess, committer: ChainClient
) -> None:
    """A TrainingConfig holding a wire format this coloco does not know (a newer contract's
    code 7, written into its storage) is refused with the code and the known ones, never read
    as fp32."""
    config = committer.deployment.address("TrainingConfig")
    # Ownable's owner is slot 0; Config's first members share slot 1, low bytes first:
    # innerSteps, innerLrE6, traceInterval, outerLrE6, outerMomentumE6 (4 bytes each), then
    # wireFormat (1 byte, at bit 160).
    slot = int(chain.call("eth_getStorageAt", [config, "0x1", "latest"]), 16)
    assert slot & 0xFFFFFFFF == TrainingSettings.read(committer).inner_steps
    assert (slot >> 160) & 0xFF == TrainingSettings.read(committer).wire_format.value
    slot = slot & ~(0xFF << 160) | (7 << 160)
    chain.call("anvil_setStorageAt", [config, "0x1", "0x" + slot.to_bytes(32, "big").hex()])
    with pytest.raises(ConfigError, match=r"wireFormat is 7.*2 \(int8\) or 3 \(sparse\)"):
        TrainingSettings.read(committer)


def test_reads_at_a_past_block(chain: AnvilProcess, deployment: Deployment) -> None:
    operator = ChainClient(chain.rpc_url, deployment, Account.from_key(chain.accounts[6][1]))
    node_key = vector_key("chain-test/past-block-node")
    node = address_of_private_key(node_key)
    before = operator.block_number()
    operator.register_node(node_key, chain.accounts[6][0], operator=chain.accounts[6][0])
    operator.transact("StakeManager", "stake", node, value=3 * 10**18)
    now = operator.node_info(node)
    assert now.registered and now.staked == 3 * 10**18
    assert now.operator == chain.accounts[6][0]
    then = operator.node_info(node, block=before)
    assert not then.registered and then.staked == 0
    assert operator.node_info(node, block="latest") == now
    assert TrainingSettings.read(operator, block=before) == TrainingSettings.read(operator)


def test_many_sends_without_waiting_use_consecutive_nonces(committer: ChainClient) -> None:
    hashes = [
        committer.send(
            "ContributionLedger", "commitRound", RUN, i, h(f"r{i}"), h(f"c{i}"), i, h(f"a{i}"), 0
        )
        for i in range(6)
    ]
    receipts = [committer.wait_for_receipt(tx) for tx in hashes]
    assert all(r["status"] == 1 for r in receipts)
    nonces = [committer.w3.eth.get_transaction(tx)["nonce"] for tx in hashes]
    assert nonces == list(range(nonces[0], nonces[0] + 6))
    assert committer.last_round(RUN) == 5


def test_nonce_resyncs_after_another_process_used_the_key(
    committer: ChainClient, chain: AnvilProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="protocol.chain")
    commit(committer, 0)
    commit(committer, 1)  # caches the nonce
    twin = ChainClient(chain.rpc_url, committer.deployment, committer.account, retry=FAST_RETRY)
    commit(twin, 2)  # the cached nonce of `committer` is now stale
    receipt = commit(committer, 3)
    assert receipt["status"] == 1
    assert committer.last_round(RUN) == 3
    assert "refused" in caplog.text and "resyncing" in caplog.text


def test_waits_for_confirmations(committer: ChainClient, chain: AnvilProcess) -> None:
    miner = threading.Timer(0.5, chain.mine, args=(2,))
    miner.start()
    started = time.monotonic()
    receipt = committer.transact(
        "ContributionLedger", "commitRound", RUN, 0, h("r"), h("c"), 1, h("a"), 0, confirmations=3
    )
    miner.join()
    assert time.monotonic() - started >= 0.4
    assert committer.block_number() >= receipt["blockNumber"] + 2
    with pytest.raises(ChainError, match="short of 9 confirmations"):
        committer.wait_for_receipt(
            bytes(receipt["transactionHash"]), confirmations=9, timeout_s=0.3
        )


def test_refuses_wrong_chain_and_missing_account(
    committer: ChainClient, chain: AnvilProcess
) -> None:
    wrong = dataclasses.replace(committer.deployment, chain_id=1)
    client = ChainClient(chain.rpc_url, wrong, committer.account, retry=FAST_RETRY)  # type: ignore[arg-type]
    with pytest.raises(DeploymentError, match="is chain 31337 but the deployment is for chain 1"):
        commit(client, 1)
    reader = ChainClient(chain.rpc_url, committer.deployment)
    with pytest.raises(ChainError, match="create the client with an account"):
        commit(reader, 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_refused_connection_raises_rpc_unavailable(deployment: Deployment) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    client = ChainClient(url, deployment, retry=FAST_RETRY)
    with pytest.raises(RpcUnavailableError, match=f"RPC {url} did not answer .* after 3 attempts"):
        client.block_number()
    with pytest.raises(RpcUnavailableError, match="check that the node is running"):
        client.dispute_window()


@contextlib.contextmanager
def _rpc_proxy(upstream: str, before: Callable[[BaseHTTPRequestHandler], int]) -> Iterator[str]:
    """A real HTTP proxy to `upstream` (its URL yielded): `before(request)` sees each request and
    returns 200 to forward it, or another status to answer with instead."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            status = before(self)
            if status != 200:
                self.send_response(status)
                self.end_headers()
                return
            answer = requests.post(
                upstream, data=body, headers={"Content-Type": "application/json"}, timeout=10
            )
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def flaky_proxy(anvil: AnvilProcess) -> Iterator[tuple[str, list[int]]]:
    """A real HTTP proxy to anvil that answers 503, then 429, then forwards."""
    seen: list[int] = []
    failures = iter([503, 429])

    def before(_: BaseHTTPRequestHandler) -> int:
        seen.append(status := next(failures, 200))
        return status

    with _rpc_proxy(anvil.rpc_url, before) as url:
        yield url, seen


def test_transient_http_errors_are_retried(
    flaky_proxy: tuple[str, list[int]], deployment: Deployment
) -> None:
    url, seen = flaky_proxy
    client = ChainClient(url, deployment, retry=FAST_RETRY)
    assert client.block_number() >= 1
    assert seen == [503, 429, 200]
    assert client.dispute_window() > 0


def test_repr_does_not_leak_the_key(committer: ChainClient) -> None:
    assert committer.account is not None
    assert committer.account.key.hex().removeprefix("0x") not in repr(committer)
    assert Address(str(committer.account_address)) in repr(committer)


def test_mined_failure_is_replayed_into_the_custom_error(committer: ChainClient) -> None:
    commit(committer, 0)
    commit(committer, 4)
    with pytest.raises(ContractRevertError) as info:  # explicit gas skips estimation: it is mined
        committer.transact(
            "ContributionLedger", "commitRound", RUN, 4, h("r"), h("c"), 1, h("a"), 0, gas=200_000
        )
    assert info.value.error_name == "RoundNotIncreasing"
    assert info.value.error_args == (RUN, 4, 4)


@pytest.fixture
def forward_proxy(anvil: AnvilProcess) -> Iterator[tuple[str, list[str]]]:
    """A real HTTP forward proxy in front of anvil: records the absolute URL of each request."""
    paths: list[str] = []

    def before(request: BaseHTTPRequestHandler) -> int:
        paths.append(request.path)
        return 200

    with _rpc_proxy(anvil.rpc_url, before) as url:
        yield url, paths


def test_the_environments_proxy_settings_still_apply(
    forward_proxy: tuple[str, list[str]], deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client reads HTTP_PROXY / NO_PROXY once, when built (not at every request), and
    honours them: through the proxy an unresolvable RPC host answers; excluded, it does not."""
    proxy, paths = forward_proxy
    rpc = "http://rpc.coloco.invalid:8545"
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy)
    client = ChainClient(rpc, deployment, retry=FAST_RETRY)
    monkeypatch.delenv("HTTP_PROXY")  # read at construction: later changes do not matter
    assert client.block_number() >= 1
    assert paths and all(p.startswith(rpc) for p in paths), paths
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.setenv("NO_PROXY", "rpc.coloco.invalid")
    direct = ChainClient(rpc, deployment, retry=FAST_RETRY)
    with pytest.raises(RpcUnavailableError):
        direct.block_number()
