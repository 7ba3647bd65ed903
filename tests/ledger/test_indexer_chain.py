"""The indexer without an archive node (a proxy refuses every historical state read), in small
chunks, behind a confirmation depth, and across a reorg that drops an indexed commit."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from sqlmodel import Session, select

from bench.harness.nodes import contract, h, new_node
from ledger.chain.client import LedgerChain
from ledger.chain.indexer import Indexer
from ledger.core.models import ChainCommit
from protocol.deploy import deploy
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess


@pytest.fixture(scope="module")
def anvil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilProcess]:
    """This module's own anvil, not the session's: its reorg test reads logs at heights the
    session's earlier tests mined and reverted, and there anvil once answered a mined commit's
    block with no logs (a full run under load: "recommit in block 122 not indexed ... logs of
    that block now []"), a state this test cannot own."""
    with AnvilProcess.start(tmp_path_factory.mktemp("indexer-anvil")) as node:
        yield node


@pytest.fixture(scope="module")
def deployment(anvil: AnvilProcess, tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    out = tmp_path_factory.mktemp("indexer-deployment") / "deployment.json"
    return deploy(anvil.rpc_url, anvil.accounts[0][1], committer=anvil.accounts[1][0], out_path=out)


@pytest.fixture(scope="module")
def deployment_file(deployment: Deployment, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("indexer-dep") / "deployment.json"
    deployment.save(path)
    return path


class PrunedNode:
    """A real proxy to anvil that answers like a pruned (non-archive) node: state reads at any
    block but "latest" fail with "missing trie node"; it counts the eth_getLogs calls."""

    def __init__(self, upstream: str) -> None:
        self.historical_reads = 0
        self.log_queries = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                req = json.loads(body)
                params = req.get("params") or []
                if req.get("method") == "eth_getLogs":
                    outer.log_queries += 1
                if req.get("method") in ("eth_call", "eth_getBalance", "eth_getStorageAt") and (
                    len(params) > 1 and params[-1] not in ("latest", "pending")
                ):
                    outer.historical_reads += 1
                    err = {"code": -32000, "message": "missing trie node (pruned)"}
                    content = json.dumps({"jsonrpc": "2.0", "id": req["id"], "error": err})
                    payload = content.encode()
                else:
                    payload = requests.post(
                        upstream, data=body, headers={"Content-Type": "application/json"}
                    ).content
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def pruned(chain: AnvilProcess) -> Iterator[PrunedNode]:
    node = PrunedNode(chain.rpc_url)
    yield node
    node.server.shutdown()
    node.server.server_close()


def test_initial_sync_without_archive_node_in_chunks(
    ledger, chain, deployment, deployment_file, nodes, pruned: PrunedNode
) -> None:
    ledger.prepare_database()
    chain.mine(40)  # history to walk through
    late = new_node(chain.w3, deployment, chain.accounts[6][0])
    indexer = Indexer(ledger.engine, LedgerChain(pruned.url, deployment_file, None), chunk_blocks=7)
    indexer.catch_up()
    snap = indexer.snapshot
    assert snap.indexed_block == chain.w3.eth.block_number
    assert all(snap.is_active(n.address) for n in [*nodes, late])
    assert pruned.historical_reads == 0
    span = snap.indexed_block - deployment.deployment_block + 1
    assert pruned.log_queries >= span // 7  # chunked, never one query over all history


def _commit(chain: AnvilProcess, deployment, run: str, round_: int, work: int = 1) -> int:  # type: ignore[no-untyped-def]
    """Commit (run, round_) with total work `work`; return the block it was mined in."""
    cl = contract(chain.w3, deployment, "ContributionLedger")
    args = (bytes.fromhex(run[2:]), round_, bytes(31) + b"\x01", bytes.fromhex(h("ck")[2:]), work)
    tx = cl.functions.commitRound(*args, bytes(32), 0).transact({"from": deployment.committer})
    receipt = chain.w3.eth.wait_for_transaction_receipt(tx)
    assert receipt["status"] == 1
    return int(receipt["blockNumber"])


def test_depth_and_reorg(ledger, chain, deployment, caplog) -> None:  # type: ignore[no-untyped-def]
    ledger.prepare_database()
    run = h("reorg-run")
    indexer = Indexer(ledger.engine, ledger.chain, depth=2, rewind_blocks=8)
    indexer.catch_up()
    _commit(chain, deployment, run, 0)
    indexer.catch_up()
    assert (run, 0) not in indexer.snapshot.checkpoints  # 0 blocks deep, 2 needed
    chain.mine(2)
    indexer.catch_up()
    assert indexer.snapshot.checkpoints[(run, 0)] == h("ck")
    # a reorg deeper than the indexer's depth replaces the commit's block with an empty one
    chain.call("anvil_reorg", [3, []])
    chain.mine(3)
    indexer.catch_up()
    assert "reorg" in caplog.text
    assert (run, 0) not in indexer.snapshot.checkpoints
    with Session(ledger.engine) as s:
        assert s.exec(select(ChainCommit).where(ChainCommit.run_id == run)).first() is None
    # committed again on the new chain (another total work: not the reorged-out transaction
    # replayed), above the indexer's cursor: seen again
    again = _commit(chain, deployment, run, 0, work=2)
    assert again > (indexer.snapshot.indexed_block or 0)
    chain.mine(2)
    indexer.catch_up()
    seen = indexer.chain.logs(again, again)  # what the chain answers, named if this ever fails
    assert indexer.snapshot.checkpoints.get((run, 0)) == h("ck"), (
        f"recommit in block {again} not indexed: cursor {indexer.snapshot.indexed_block}, head "
        f"{chain.block_number()}, logs of that block now {[e.name for e in seen]}"
    )
