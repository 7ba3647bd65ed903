"""Security review F6 at the ledger: a member that lies in the all-reduce takes no round.

On the reduce-scatter the liar's result was the only one equal to the ledger's step over the
attested pseudo-gradients; the ledger failed every honest member with ``result_mismatch`` and paid
the liar the whole compute pool. In the checked all-gather a liar can only make its peers average
one packet (the one it signed a ``COMMIT`` to before the exchange) and attest another; with its
result computed from the attested one it again holds the only result the ledger recomputes.

The in-process network (real anvil, the real ledger over its HTTP API, real signatures) plays that
round: two honest members averaged the liar's committed packet X; the liar attests Y (X x 1.001)
with the step over Y. Two bounds, each a test:

- a strict majority agreeing on another result is never condemned by one matching minority, even
  with no evidence at all;
- with the members' signed commits (what honest nodes hand the ledger), the liar fails
  ``equivocation`` on its own signature and earns nothing, and the honest members are paid.
"""

from __future__ import annotations

import json
from typing import Any

from protocol.attestation import ComputeAttestation
from protocol.blob_auth import UploadSigner
from protocol.blobs import encode_blob
from protocol.coordination import Kind, SignedMessage
from protocol.hashing import hash_state_dict
from protocol.signing import sign_attestation
from tests.redteam.network import Network, RoundLog
from tests.redteam.node import Node, Work


def _commit(net: Network, node: Node, r: int, work: Work) -> str:
    """The node's signed COMMIT of its packet, as trainer.round.commits posts it."""
    signed = SignedMessage.create(
        node.key.key,
        node.signer.address,
        net.domain,
        run_id=bytes.fromhex(net.run_id[2:]),
        round=r,
        attempt=0,
        kind=Kind.COMMIT,
        payload={
            "pseudoGradient": "0x" + bytes(hash_state_dict(work.honest)).hex(),
            "tokens": work.tokens,
        },
    )
    return signed.to_wire().decode()


def _post(
    net: Network,
    node: Node,
    r: int,
    work: Work,
    result: bytes,
    group: list[str],
    commits: list[str] | None,
) -> str:
    pg = work.pseudo_gradient
    pg_hash = bytes(hash_state_dict(pg))
    net.client.put(
        f"/v1/blobs/0x{pg_hash.hex()}",
        content=encode_blob(pg),
        headers=UploadSigner(node.key.key, net.domain).headers("0x" + pg_hash.hex()),
    )
    cfg = net.ledger.indexer.snapshot.config
    assert cfg is not None
    att = ComputeAttestation.from_json({
        "runId": net.run_id, "round": r, "node": node.address, "configVersion": cfg.version,
        "baseCheckpoint": "0x" + bytes(hash_state_dict(node.bases[-1])).hex(),
        "pseudoGradient": "0x" + pg_hash.hex(), "dataShard": "0x" + work.shard.hex(),
        "innerSteps": work.steps, "tokens": work.tokens, "resultCheckpoint": "0x" + result.hex(),
        "traceRoot": "0x" + work.trace_root.hex(),
    })  # fmt: skip
    body: dict[str, Any] = {
        "attestation": att.to_json(),
        "signature": "0x" + sign_attestation(att, net.domain, node.key.key).hex(),
        "round_members": group,
    }
    if commits is not None:
        body["input_commits"] = commits
    return net.post(body)


def _lying_round(net: Network, *, evidence: bool) -> dict[str, dict[str, Any]]:
    honest = [net.add_node(label=f"honest{i}") for i in range(2)]
    liar = net.add_node(label="liar")
    nodes = [*honest, liar]
    r = 1
    _, base, momentum = net.committed()
    for n in nodes:
        n.join(r)
    works = {n.address: n.train(r, base) for n in nodes}
    for n in nodes:
        n.finish(works[n.address], works, None)
    lie = works[liar.address]
    lie.pseudo_gradient = {k: v * 1.001 for k, v in lie.honest.items()}  # Y: what it attests
    group = sorted(works)
    weights = [works[a].tokens for a in group]
    exchanged = Node.outer_result(net, base, momentum, [works[a].honest for a in group], weights)
    attested = Node.outer_result(
        net, base, momentum, [works[a].pseudo_gradient for a in group], weights
    )
    commits = [_commit(net, n, r, works[n.address]) for n in nodes] if evidence else None
    assert _post(net, liar, r, lie, attested, group, commits) == "accepted"
    for n in honest:
        assert _post(net, n, r, works[n.address], exchanged, group, commits) == "accepted"
    net.settle(r, net.logs.setdefault(r, RoundLog(r)))
    view = net.client.get(f"/v1/runs/{net.run_id}/rounds/{r}").json()
    labels = {n.address: n.label for n in nodes}
    return {labels[s["node"]]: s for s in view["scores"]}


def test_a_matching_minority_never_condemns_the_majority(network: Network) -> None:
    """F6, no evidence: the two honest members agree on the step over what they averaged; the
    liar's result alone matches the ledger's. Nobody is failed on the result check, and the liar
    is not paid the round's pool for it."""
    scores = _lying_round(network, evidence=False)
    for label in ("honest0", "honest1"):
        s = scores[label]
        assert not s["reason"].startswith("[result_mismatch]"), s
        assert s["verified"] and int(s["reward"]) > 0, s
        assert "not confirmed" in s["reason"], s
    most = max(int(scores[h]["reward"]) for h in ("honest0", "honest1"))
    assert int(scores["liar"]["reward"]) <= most, scores  # not the whole pool


def test_a_member_attesting_another_packet_than_it_committed_fails_on_its_signature(
    network: Network,
) -> None:
    """F6 with the signed commits the honest members hand the ledger: the liar signed a COMMIT to
    X and attested Y; it fails ``equivocation`` and earns nothing, the honest members are paid
    and not held to a step over a packet they never received."""
    scores = _lying_round(network, evidence=True)
    liar = scores["liar"]
    assert liar["reason"].startswith("[equivocation]"), liar
    assert "signed a commitment to packet" in liar["reason"], liar
    assert int(liar["reward"]) == 0
    frauds = network.client.get("/v1/frauds").json()
    (fraud,) = [f for f in frauds if f["node"] == liar["node"]]  # a slash proposal, self-proving
    assert fraud["evidence"]["kind"] == "commit_equivocation", fraud
    assert (
        fraud["evidence"]["attestation"]["pseudo_gradient"]
        != json.loads(fraud["evidence"]["commit"]["payload"])["pseudoGradient"]
    )
    for label in ("honest0", "honest1"):
        s = scores[label]
        assert s["verified"] and int(s["reward"]) > 0, s
        assert "its signed commitment is the evidence" in s["reason"], s
