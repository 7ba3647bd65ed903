"""Signed posts and checked reads over the (untrusted) rendezvous store.

Anyone who reaches the store can write any key, so nothing read from it is used unless it is a
:class:`~protocol.coordination.SignedMessage` that passes, in this order (cheap checks first):

1. ``unsigned``: it parses as a signed message (form, size, 65-byte low-s signature);
2. ``stale``: its run, kind, round and attempt are the ones the key is for (a replayed message
   from another round, attempt or kind stops here);
3. ``wrong_signer``: a per-node key (``leave/r/<addr>``) holds a message of that node;
4. ``foreign``: the signer is registered and active (:mod:`~trainer.network.coordination.registry`);
5. ``bad_signature``: the signature recovers to the signer over this payload.

Every refusal is logged once (per key and value) and kept in :attr:`Board.refusals`, which the
tests and the node's events read to say which check stopped an attack.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from protocol.coordination import Kind, SignedMessage
from protocol.eip712 import Eip712Domain
from protocol.errors import ProtocolError
from protocol.keys import NodeKey
from trainer.network.coordination.registry import Registry
from trainer.network.coordination.store import FailoverStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Refusal:
    check: str
    key: str
    detail: str


class Board:
    """One node's signed view of the store: post as this node, read what others signed."""

    def __init__(
        self,
        store: FailoverStore,
        key: NodeKey,
        domain: Eip712Domain,
        run_id: bytes,
        registry: Registry,
    ) -> None:
        self.store = store
        self.key = key
        self.domain = domain
        self.run_id = run_id
        self.registry = registry
        self.refusals: list[Refusal] = []
        self._seen: dict[tuple[str, bytes], SignedMessage | None] = {}

    @property
    def address(self) -> str:
        return str(self.key.address)

    def sign(self, kind: Kind, round: int, attempt: int, payload: dict[str, Any]) -> SignedMessage:
        return SignedMessage.create(self.key.private_key, self.key.address, self.domain,
                                    run_id=self.run_id, round=round, attempt=attempt, kind=kind,
                                    payload=payload)  # fmt: skip

    def post(
        self, key: str, kind: Kind, round: int, attempt: int, payload: dict[str, Any]
    ) -> SignedMessage:
        signed = self.sign(kind, round, attempt, payload)
        self.store.set(key, signed.to_wire())
        return signed

    def refuse(self, check: str, key: str, detail: str) -> None:
        self.refusals.append(Refusal(check, key, detail))
        log.warning("coordination: refused %s (%s): %s", key, check, detail)

    def read(
        self,
        key: str,
        kind: Kind,
        round: int | None,
        attempt: int | None,
        *,
        signer: str | None = None,
    ) -> SignedMessage | None:
        """The verified message under ``key``, or None (absent, or refused and logged)."""
        if not self.store.check([key]):
            return None
        return self.verify(self.store.get(key), key, kind, round, attempt, signer=signer)

    def verify(
        self,
        raw: bytes,
        key: str,
        kind: Kind,
        round: int | None,
        attempt: int | None,
        *,
        signer: str | None = None,
        cache: bool = True,
    ) -> SignedMessage | None:
        """``raw`` as a message of ``kind`` for (run, round, attempt) by an admitted signer.

        ``round`` / ``attempt`` None accept any (the caller checks them). Results are cached per
        (key, value): a refusal is logged once, a valid message verified once. ``cache=False``
        for values that change all the time (heartbeats), so the cache does not grow with them.
        """
        if not cache:
            return self._check(raw, key, kind, round, attempt, signer=signer)
        digest = hashlib.sha256(raw).digest()
        cache_key = (f"{key}|{int(kind)}|{round}|{attempt}|{signer}", digest)
        if cache_key in self._seen:
            return self._seen[cache_key]
        result = self._check(raw, key, kind, round, attempt, signer=signer)
        self._seen[cache_key] = result
        return result

    def _check(
        self,
        raw: bytes,
        key: str,
        kind: Kind,
        round: int | None,
        attempt: int | None,
        *,
        signer: str | None,
    ) -> SignedMessage | None:
        try:
            msg = SignedMessage.from_wire(bytes(raw))
        except ProtocolError as exc:
            self.refuse("unsigned", key, f"not a signed coordination message: {exc.message}")
            return None
        m = msg.message
        where = f"run 0x{m.run_id.hex()[:8]}.. {m.kind.name} round {m.round} attempt {m.attempt}"
        if (
            m.run_id != self.run_id
            or m.kind != kind
            or (round is not None and m.round != round)
            or (attempt is not None and m.attempt != attempt)
        ):
            wanted = f"{kind.name} round {round}" + (f" attempt {attempt}" if attempt else "")
            self.refuse("stale", key, f"{where} by {m.node} where {wanted} belongs (a replay?)")
            return None
        if signer is not None and m.node != signer:
            self.refuse("wrong_signer", key, f"{m.node} wrote a message that only {signer} may")
            return None
        if not self.registry.admits(m.node):
            self.refuse("foreign", key, f"{m.node} is not a registered, active node")
            return None
        try:
            msg.verify(self.domain)
        except ProtocolError as exc:
            self.refuse("bad_signature", key, exc.message)
            return None
        return msg
