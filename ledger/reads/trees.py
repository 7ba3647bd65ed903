"""The Merkle trees requests prove against, each built once from the database.

- :class:`RewardsTrees`: the amounts and rewards tree of the latest committed settlement
  (``GET /v1/rewards/{address}``): a settlement's tree never changes once written.
- :class:`EthTrees`: per funded run, the tree of its latest *indexed* ETH root
  (``GET /v1/funding/...`` and the ETH receipts of :mod:`ledger.reads.receipts`), rebuilt from
  the ``funding_event`` rows and the rounds' rewards with the settler's own split
  (:func:`ledger.chain.funding.eth_amounts`), so both build the same tree; no RPC in a request.

The read side of what the writers commit: the settlers (:mod:`ledger.chain.settlement`,
:mod:`ledger.chain.funding`) never import this module.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from sqlmodel import Session, col, select

from ledger.chain.funding import eth_amounts, fold_history
from ledger.chain.leases import LeaseLeaf, leaf_hashes, leaves_of
from ledger.chain.settlement import tree_of
from ledger.core.models import FundingEvent
from protocol.merkle import RewardsTree
from protocol.types import Address

Amounts = dict[str, int]


_KEPT = 8  # trees kept: the latest settlement's (rewards) and each leased run's latest (leases)


class RewardsTrees:
    """Committed settlements' amounts and trees by settlement id; only the few asked for lately
    are kept (the latest, and each leased run's latest). ``leases``: the deployment's
    ComputeLeases, whose leaves each settlement folds into its root (None: an older
    deployment)."""

    def __init__(self, leases: Address | None = None) -> None:
        self.leases = leases
        self._built: dict[int, tuple[Amounts, RewardsTree | None, list[LeaseLeaf]]] = {}

    def of(
        self, settlement_id: int, amounts_json: Callable[[], str | tuple[str, str | None]]
    ) -> tuple[Amounts, RewardsTree | None]:
        """The settlement's amounts and tree; ``amounts_json`` reads its stored amounts and lease
        leaves (called only the first time this settlement is asked for)."""
        amounts, tree, _ = self.built(settlement_id, amounts_json)
        return amounts, tree

    def built(
        self, settlement_id: int, amounts_json: Callable[[], str | tuple[str, str | None]]
    ) -> tuple[Amounts, RewardsTree | None, list[LeaseLeaf]]:
        """:meth:`of` and the settlement's lease leaves."""
        built = self._built.get(settlement_id)
        if built is None:
            raw = amounts_json()
            tree_text, leases_text = raw if isinstance(raw, tuple) else (raw, None)
            amounts = {a: int(v) for a, v in json.loads(tree_text)}
            leaves = leaves_of(leases_text)
            built = (amounts, tree_of(amounts, leaf_hashes(self.leases, leaves)), leaves)
            if len(self._built) >= _KEPT:
                self._built.clear()
            self._built[settlement_id] = built
        return built


def eth_history(session: Session, run_id: str) -> list[tuple[int, int]]:
    """[(round, wei paid by that round)] of the run's indexed ETH roots that count (a root
    revoked while latest does not: :func:`ledger.chain.funding.fold_history`), oldest first."""
    rows = session.exec(
        select(FundingEvent)
        .where(
            FundingEvent.run_id == run_id,
            col(FundingEvent.name).in_(("EthRootCommitted", "EthRootRevoked")),
        )
        .order_by(col(FundingEvent.block_number), col(FundingEvent.log_index))
    ).all()
    events = []
    for row in rows:
        args = json.loads(row.args)
        events.append(
            (row.name, row.ref or "", int(args.get("round", 0)), int(args.get("totalWei", 0)))
        )
    return fold_history(events)


class EthTrees:
    """The tree of each funded run's latest indexed ETH root, built once per root."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled  # the deployment has RunFunding (else no run is ever funded)
        # run -> ((round, total wei) of the root it was built for, tree, amounts, round)
        self._trees: dict[str, tuple[tuple[int, int], RewardsTree | None, Amounts, int]] = {}

    def tree(self, session: Session, run_id: str) -> tuple[RewardsTree | None, Amounts, int | None]:
        """The tree of the run's latest indexed ETH root, its amounts and its round: from the
        database only, built once per root."""
        history = eth_history(session, run_id)
        if not history:
            return None, {}, None
        key = (history[-1][0], sum(w for _, w in history))
        cached = self._trees.get(run_id)
        if cached is not None and cached[0] == key:
            return cached[1], cached[2], cached[3]
        amounts = eth_amounts(session, run_id, history)
        tree = RewardsTree.build(sorted((Address(a), v) for a, v in amounts.items()))
        built = tree if amounts else None
        self._trees[run_id] = (key, built, amounts, history[-1][0])
        return built, amounts, history[-1][0]
