"""The ledger tests' HTTP helpers: a signed attestation's request body, a signed join, ticks until
a round reaches a state, a blob upload's signed headers. The nodes and attestations they take come
from :mod:`bench.harness.nodes` (the ledger benchmarks load a ledger with the same ones)."""

from __future__ import annotations

from typing import Any

from bench.harness.nodes import NodeKey, send
from protocol.attestation import ComputeAttestation
from protocol.eip712 import Eip712Domain
from protocol.signing import sign_attestation
from protocol.types import Address


def body(
    att: ComputeAttestation,
    key: bytes,
    domain: Eip712Domain,
    members: list[str] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "attestation": att.to_json(),
        "signature": "0x" + sign_attestation(att, domain, key).hex(),
    }
    if members is not None:
        out["round_members"] = members
    return out


def join(client: Any, node: NodeKey, run_id: str, round_: int, domain: Eip712Domain) -> Any:
    """POST a signed RoundJoin (membership of ``round_``); returns the response."""
    from protocol.join import RoundJoin
    from protocol.signing import sign_digest
    from protocol.types import RoundNumber, RunId

    j = RoundJoin(RunId(bytes.fromhex(run_id[2:])), RoundNumber(round_), Address(node.address))
    sig = sign_digest(j.digest(domain), node.key)
    return client.post("/v1/joins", json={"join": j.to_json(), "signature": "0x" + sig.hex()})


def tick_until(
    ledger: Any, run_id: str, round_: int, state: str | tuple[str, ...], timeout: float = 10.0
) -> None:
    """Run lifecycle ticks until the round reaches ``state`` (or one of several; receipts can
    lag a send)."""
    import time

    from sqlmodel import Session, select

    from ledger.core.models import RoundState

    deadline = time.monotonic() + timeout
    while True:
        ledger.tick()
        with Session(ledger.engine) as s:
            rnd = s.exec(
                select(RoundState).where(RoundState.run_id == run_id, RoundState.round == round_)
            ).first()
        if rnd is not None and rnd.state in ((state,) if isinstance(state, str) else state):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"round {round_} is {rnd and rnd.state}, not {state}")
        time.sleep(0.05)


def upload_headers(node: NodeKey, domain: Eip712Domain, digest: str) -> dict[str, str]:
    """The signed headers with which ``node`` may PUT blob ``digest`` (protocol.blob_auth)."""
    from protocol.blob_auth import UploadSigner

    return UploadSigner(node.key, domain).headers(digest)


def open_funded_run(chain: Any, deployment: Any, funding: Any, run: bytes, *, open_s: int) -> None:
    """Open ``run`` on RunFunding for ``open_s`` seconds (0.1 ETH a round) and deposit 1 ETH from
    a backer (anvil account 6)."""
    w3 = chain.w3
    end = w3.eth.get_block("latest")["timestamp"] + open_s
    send(w3, funding.functions.openRun(run, end, 10**17), deployment.committer)
    send(w3, funding.functions.deposit(run), chain.accounts[6][0], value=10**18)


def governance_sets(chain: Any, deployment: Any, fn: str, *args: Any) -> int:
    """Run a TrainingConfig setter as its owner, the Timelock (what an executed vote does);
    returns the block it was mined in."""
    from protocol.deployment import abi

    config = chain.w3.eth.contract(
        address=deployment.address("TrainingConfig"), abi=abi("TrainingConfig")
    )
    receipt = chain.transact_as(deployment.address("TimelockController"), config, fn, *args)
    return int(receipt["blockNumber"])
