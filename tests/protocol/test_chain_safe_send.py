"""Safe sends against a real anvil: a send that times out but lands is not sent twice, and a
transaction stuck behind a low fee is replaced (same nonce, higher fees) and mined once."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests
from eth_account import Account

from bench.harness.nodes import new_node
from protocol.chain import ChainClient, RetryPolicy
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.types import Address

pytestmark = pytest.mark.anvil

STAKE = 3 * 10**18


class DroppingProxy:
    """A real HTTP proxy to anvil that forwards the first ``drops`` sends, then loses the reply."""

    def __init__(self, upstream: str, drops: int, hold_s: float) -> None:
        self.drops = drops
        self.sends = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                method = json.loads(body).get("method")
                answer = requests.post(
                    upstream, data=body, headers={"Content-Type": "application/json"}, timeout=10
                )
                if method == "eth_sendRawTransaction":
                    outer.sends += 1
                    if outer.drops > 0:
                        outer.drops -= 1
                        time.sleep(hold_s)  # the transaction is in; the answer never comes
                        self.close_connection = True
                        return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(chain: AnvilProcess) -> Iterator[DroppingProxy]:
    p = DroppingProxy(chain.rpc_url, drops=1, hold_s=0.8)
    try:
        yield p
    finally:
        p.close()


def operator_of(chain: AnvilProcess, deployment: Deployment, url: str, **kw: Any) -> ChainClient:
    retry = RetryPolicy(attempts=4, base_delay_s=0.05, max_delay_s=0.1)
    account = Account.from_key(chain.accounts[6][1])
    return ChainClient(url, deployment, account, retry=retry, **kw)


def test_send_that_times_out_but_lands_is_not_sent_twice(
    chain: AnvilProcess,
    deployment: Deployment,
    proxy: DroppingProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="protocol.chain")
    direct = operator_of(chain, deployment, chain.rpc_url)
    node = Address(new_node(chain.w3, deployment, chain.accounts[6][0], stake=0).address)
    nonce_before = direct.w3.eth.get_transaction_count(chain.accounts[6][0])
    balance_before = direct.w3.eth.get_balance(chain.accounts[6][0])

    client = operator_of(chain, deployment, proxy.url, request_timeout_s=0.3)
    receipt = client.transact("StakeManager", "stake", node, value=STAKE)

    assert receipt["status"] == 1
    assert proxy.sends >= 2  # the lost answer made the client send again
    assert direct.node_info(node).staked == STAKE  # paid once
    assert direct.w3.eth.get_transaction_count(chain.accounts[6][0]) == nonce_before + 1
    spent = balance_before - direct.w3.eth.get_balance(chain.accounts[6][0])
    assert STAKE <= spent < STAKE + 10**16
    assert "landed" in caplog.text


def _stake_in_background(client: Any, node: Address) -> tuple[threading.Thread, dict[str, Any]]:
    """``StakeManager.stake`` sent in a thread (the test mines meanwhile); returns once the first
    transaction is out. ``out`` gets its ``receipt``, or the ``error`` it ended with."""
    out: dict[str, Any] = {}

    def stake() -> None:
        try:
            out["receipt"] = client.transact("StakeManager", "stake", node, value=STAKE)
        except Exception as exc:  # reported by the caller's assertions
            out["error"] = exc

    worker = threading.Thread(target=stake)
    worker.start()
    deadline = time.monotonic() + 10
    while not client._sent and time.monotonic() < deadline:
        time.sleep(0.02)
    return worker, out


def test_stuck_low_fee_transaction_is_replaced_once(
    chain: AnvilProcess, deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="protocol.chain")
    client = operator_of(chain, deployment, chain.rpc_url, bump_after_s=0.3, poll_interval_s=0.02)
    node = Address(new_node(chain.w3, deployment, chain.accounts[6][0], stake=0).address)
    nonce_before = client.w3.eth.get_transaction_count(chain.accounts[6][0])
    chain.call("evm_setAutomine", [False])
    try:
        worker, out = _stake_in_background(client, node)
        deadline = time.monotonic() + 10
        first = next(iter(client._sent))
        # the fee market jumps: the first transaction's fee cap is now too low to be mined
        chain.call("anvil_setNextBlockBaseFeePerGas", [hex(200 * 10**9)])
        chain.mine(1)
        assert client.w3.eth.get_transaction_count(chain.accounts[6][0]) == nonce_before
        while "replaced by" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
        chain.mine(1)
        worker.join(timeout=20)
    finally:
        chain.call("evm_setAutomine", [True])
    assert "error" not in out, out.get("error")
    receipt = out["receipt"]
    assert receipt["status"] == 1
    assert bytes(receipt["transactionHash"]) != first  # the replacement was mined
    assert client.node_info(node).staked == STAKE
    assert client.w3.eth.get_transaction_count(chain.accounts[6][0]) == nonce_before + 1


def test_a_replacement_refused_for_a_base_fee_that_rose_is_retried(
    chain: AnvilProcess, deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    """The base fee of the next block rises after the client read the latest one: the node refuses
    the replacement ("max fee per gas less than block base fee"). The client keeps the old
    transaction and replaces it again at its next bump, with the fee read then; before, the
    refusal ended the send with a ChainError (seen as a flaky run of the test above)."""
    caplog.set_level(logging.WARNING, logger="protocol.chain")
    client = operator_of(chain, deployment, chain.rpc_url, bump_after_s=0.3, poll_interval_s=0.02)
    node = Address(new_node(chain.w3, deployment, chain.accounts[6][0], stake=0).address)
    chain.call("evm_setAutomine", [False])
    try:
        worker, out = _stake_in_background(client, node)
        deadline = time.monotonic() + 10
        # the next block's base fee jumps while the latest block still shows the old one
        chain.call("anvil_setNextBlockBaseFeePerGas", [hex(200 * 10**9)])
        while "retrying at the next bump" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "retrying at the next bump" in caplog.text
        chain.mine(1)  # the latest block now carries the high base fee: the next bump covers it
        while "replaced by" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
        chain.mine(1)
        worker.join(timeout=20)
    finally:
        chain.call("evm_setAutomine", [True])
    assert "error" not in out, out.get("error")
    assert out["receipt"]["status"] == 1
    assert client.node_info(node).staked == STAKE
