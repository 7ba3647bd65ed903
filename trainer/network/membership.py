"""Elastic membership at round boundaries, over an untrusted ``torch.distributed.TCPStore``.

Every value a node acts on is a signed coordination message checked by
:class:`~trainer.network.coordination.board.Board` (unsigned, foreign, stale or replayed ones are
refused and logged). For round ``r`` (attempt ``a`` after a member died or sat out):

- each node posts a signed ``JOIN`` (its chain head, its successor endpoint and, once it serves
  checkpoints, where) in a slot of
  ``members/r/a``; it re-posts if its join disappears or is overwritten;
- once every expected node joined and the join window passed (or at the timeout), a member posts
  the signed ``ROUND_OPEN`` under ``members/r/a/open`` with ``compare_set``: the members' signed
  joins themselves, and the block at which everyone reads TrainingConfig (at least every member's
  join head). A reader accepts it only if the closer is a member and every embedded join verifies;
  an invalid value there is refused and replaced. The same message goes to ``current_round``;
- expected = last round's members minus those that posted a signed ``LEAVE`` (round 1:
  ``min_nodes``).

The closed list is a :class:`~trainer.network.members.Members`. :class:`Rendezvous` is one node's
handle on the store and holds the parts that meet there: the process group of each list
(:mod:`trainer.network.group`), the checkpoint board (:mod:`trainer.network.checkpoint_board`,
``Rendezvous.checkpoints``) and what is re-posted at a successor host when the host dies
(:mod:`trainer.network.failover`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import torch

from protocol.coordination import Kind, SignedMessage
from protocol.eip712 import Eip712Domain
from protocol.errors import ConfigError, ProtocolError
from protocol.keys import NodeKey
from trainer.network.awaiting import overdue, without_silent
from trainer.network.checkpoint_board import CheckpointBoard
from trainer.network.coordination.board import Board, Refusal
from trainer.network.coordination.heartbeat import Liveness
from trainer.network.coordination.ledger_view import LedgerMembers
from trainer.network.coordination.registry import Registry
from trainer.network.coordination.store import FailoverStore, parse_endpoint, run_namespace
from trainer.network.failover import KeptValues, successors
from trainer.network.group import RoundGroup, form_group
from trainer.network.members import Members

log = logging.getLogger(__name__)

_POLL_S = 0.05
_REPOST_S = 0.5
MAX_SLOTS = 1024
"""Join slots read per round attempt: a rogue bumping the counter cannot make readers loop."""
MAX_ATTEMPTS = 8


@dataclass(frozen=True)
class MembershipConfig:
    min_nodes: int = 1
    join_window_s: float = 1.0
    rendezvous_timeout_s: float = 60.0
    collective_timeout_s: float = 30.0
    connect_timeout_s: float = 20.0
    config_wait_s: float = 10.0
    """How long a node waits for its chain to reach the round's config block (and for the other
    members' config read-outs) before it sits the round out."""
    failover_wait_s: float = 30.0
    heartbeat_interval_s: float = 0.5
    heartbeat_timeout_s: float = 5.0
    """A member whose heartbeat has not advanced for this long is dropped from the collective
    and the round re-forms without it (well before ``collective_timeout_s``); 0 disables."""
    no_show_s: float = 5.0
    """A node the ledger accepted for the round whose rendezvous join has not appeared this long
    after this node first saw it there is not waited for (an honest node posts its rendezvous
    join right after the ledger took its own): a registered node that joins only at the ledger
    costs a round this much, not ``rendezvous_timeout_s``. Counted in ``Rendezvous.no_shows``."""
    backend: str = "auto"
    """"auto": NCCL when the node trains on CUDA, else gloo; or "gloo" / "nccl"."""


class Rendezvous:
    """One node's signed handle on the shared store."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        key: NodeKey,
        domain: Eip712Domain,
        run_id: bytes,
        registry: Registry,
        cfg: MembershipConfig | None = None,
        is_host: bool = False,
        own_endpoint: str | None = None,
        head: Callable[[], int] = lambda: 0,
    ) -> None:
        self.address = str(key.address)
        self.cfg = cfg or MembershipConfig()
        self.own_endpoint = own_endpoint or ""
        self.head = head
        self.store = FailoverStore(
            (host, port), host=is_host,
            own_endpoint=parse_endpoint(own_endpoint) if own_endpoint else None,
            connect_timeout_s=self.cfg.connect_timeout_s,
            op_timeout_s=self.cfg.rendezvous_timeout_s, failover_wait_s=self.cfg.failover_wait_s,
            namespace=run_namespace(run_id),
        )  # fmt: skip
        self.store.successors = lambda: successors(self.last)
        self.kept = KeptValues(self.store)
        """The signed values re-posted at a successor host when the host dies."""
        self.board = Board(self.store, key, domain, run_id, registry)
        self.checkpoints = CheckpointBoard(self.board, self.kept, self.round_members)
        """Who holds which weights after a round, and where they serve them."""
        self.ledger: LedgerMembers | None = None
        """The ledger's accepted joins of a round (:mod:`trainer.network.coordination.ledger_view`);
        None: no ledger, membership is the rendezvous's own rule."""
        self.liveness: Liveness | None = None
        """Heartbeats read while waiting for expected members: a silent one is not waited for."""
        self.no_shows: list[tuple[int, str]] = []
        """(round, address) of nodes the ledger accepted that never joined here in time."""
        self.timeouts: list[tuple[int, int, tuple[str, ...]]] = []
        """(round, attempt, missing) of member lists this node opened at the rendezvous timeout."""
        self.last: Members | None = None
        self._outsiders: set[tuple[str, tuple[str, ...]]] = set()
        self.forgers: dict[int, set[str]] = {}
        """Per round, the members this node caught forging their all-reduce packet (exclude)."""
        self._joins: dict[tuple[int, int], dict[str, SignedMessage]] = {}

    @property
    def refusals(self) -> list[Refusal]:
        return self.board.refusals

    # --- membership -------------------------------------------------------------------------

    def _prefix(self, round: int, attempt: int) -> str:
        return f"members/{round}/{attempt}"

    def _post_join(self, round: int, attempt: int) -> None:
        prefix = self._prefix(round, attempt)
        slot = self.store.add(f"{prefix}/n", 1) - 1
        payload: dict[str, object] = {"head": int(self.head()), "endpoint": self.own_endpoint}
        if self.checkpoints.serving:  # where it serves checkpoints: joiners fetch only there
            payload["serve"] = self.checkpoints.serving
        self.board.post(f"{prefix}/slot/{slot}", Kind.JOIN, round, attempt, payload)

    def valid_joins(self, round: int, attempt: int) -> dict[str, SignedMessage]:
        """Signed joins of (round, attempt) seen so far (kept once verified), by signer."""
        prefix = self._prefix(round, attempt)
        seen = self._joins.setdefault((round, attempt), {})
        n = self.store.add(f"{prefix}/n", 0)
        if n > MAX_SLOTS:
            self.board.refuse("flood", f"{prefix}/n", f"{n} slots; reading the first {MAX_SLOTS}")
        for i in range(min(n, MAX_SLOTS)):
            key = f"{prefix}/slot/{i}"
            if not self.store.check([key]):
                continue
            msg = self.board.verify(self.store.get(key), key, Kind.JOIN, round, attempt)
            if msg is not None and msg.message.node not in seen:
                seen[msg.message.node] = msg
        return seen

    def _leaving(self, round: int, addresses: set[str]) -> set[str]:
        return {
            a for a in addresses
            if self.board.read(f"leave/{round}/{a}", Kind.LEAVE, round, 0, signer=a) is not None
        }  # fmt: skip

    def _expected(self, round: int, attempt: int) -> set[str] | int:
        if attempt > 0:
            before = self.opened(round, attempt - 1)
            if before is None and self.last is not None and self.last.round == round:
                before = self.last
            if before is not None:
                return set(before.addresses)
        last = self.last
        latest = self.latest_open()
        if latest is not None and (last is None or latest.round > last.round):
            last = latest
        if last is not None and last.round < round:
            members = set(last.addresses)
            return members - self._leaving(round, members)
        return self.cfg.min_nodes

    def _members_of(self, msg: SignedMessage, key: str) -> Members | None:
        """The member list a verified ROUND_OPEN carries, if every embedded join verifies."""
        m = msg.message
        try:
            body = msg.body()
            joins_raw, block = body["joins"], body["config_block"]
            if not isinstance(joins_raw, list) or not isinstance(block, int) or block < 0:
                raise ValueError("joins must be a list and config_block a block number")
            joins = [self.board.verify(str(j).encode(), f"{key}#join", Kind.JOIN, m.round,
                                       m.attempt) for j in joins_raw]  # fmt: skip
        except (ProtocolError, KeyError, ValueError) as exc:
            self.board.refuse("invalid", key, f"round-open by {m.node} is malformed: {exc}")
            return None
        if any(j is None for j in joins):
            self.board.refuse("invalid", key, f"round-open by {m.node} embeds a refused join")
            return None
        by_node = {j.message.node: j.body() for j in joins if j is not None}
        if len(by_node) != len(joins) or m.node not in by_node:
            self.board.refuse("invalid", key, f"round-open by {m.node}: duplicate joins, or the "
                              "closer is not a member")  # fmt: skip
            return None
        heads = [int(b.get("head", 0)) for b in by_node.values()]
        if block < max(heads):
            self.board.refuse("config_block", key, f"round-open by {m.node} sets config block "
                              f"{block}, below a member's join head {max(heads)}")  # fmt: skip
            return None
        addresses = tuple(sorted(by_node))
        endpoints = tuple(str(by_node[a].get("endpoint", "")) for a in addresses)
        serves = tuple(str(by_node[a].get("serve", "")) for a in addresses)
        return Members(m.round, m.attempt, addresses, block, endpoints, serves)

    def opened(self, round: int, attempt: int = 0) -> Members | None:
        key = f"{self._prefix(round, attempt)}/open"
        msg = self.board.read(key, Kind.ROUND_OPEN, round, attempt)
        members = None if msg is None else self._members_of(msg, key)
        if members is not None and not self._admitted(members, key):
            members = None
        if members is not None and self._lists_forger(members, key):
            members = None
        if msg is not None and members is not None and (self.last is None
                                                        or round >= self.last.round):  # fmt: skip
            # re-posted at a successor host if this one dies (the new store starts empty); the
            # round before is kept too: its members vouch for the checkpoint a joiner adopts
            self.keep(key, msg.to_wire(), "members/", round)
        return members

    def opened_without_me(self, round: int) -> Members | None:
        """Round ``round``'s member list (attempt 0) if it opened without this node, which then
        sits the round out. The list counts as the last one seen, as a join's would: the next
        round expects its members (without it a node that skipped its first round expects
        ``min_nodes`` and, with one, opens the next round alone)."""
        members = self.opened(round)
        if members is None or self.address in members.addresses:
            return None
        if self.last is None or members.round >= self.last.round:
            self.last = members
        return members

    def forming_without_me(self, round: int) -> bool:
        """Whether round ``round``'s list is forming without this node: the run is under way
        (round ``round - 1`` has a list), this node was not in that list, and most of that
        list's members have joined ``round`` here already. They do not expect this node: their
        list opens ``join_window_s`` after their joins unless their view of the ledger shows
        it first, and its ledger join (a round trip, then a view up to 0.2 s old) can land
        after that and be charged as a no-show (``NodeRunner.run_round`` asks this only with a
        ledger; without one a join inside the window is counted). Only the last list's
        members count, and a majority of them: a registered node that posts joins of future
        rounds cannot keep newcomers out, and a minority of the members cannot either."""
        before = self.round_members(round - 1) if round > 1 else None
        if before is None or self.address in before.addresses:
            return False  # the run's first list, or a member of the last one: awaited
        joined = set(self.valid_joins(round, 0)) & set(before.addresses)
        return 2 * len(joined) > len(before.addresses)

    def _admitted(self, members: Members, key: str) -> bool:
        """With a ledger: every member's join of the round was accepted there (a registered
        node that skipped the ledger's join and closed a list with itself in it would be in the
        all-reduce but not in the ledger's outer step). The ledger's members only grow, so a
        list an honest node closed passes for every later reader."""
        if self.ledger is None:
            return True
        view = self.ledger(members.round)
        if view is not None and set(members.addresses) <= view.members:
            return True
        view = self.ledger(members.round, fresh=True)
        if view is None:
            return True  # the ledger does not answer: its joins cannot be checked
        outside = tuple(sorted(set(members.addresses) - view.members))
        if not outside:
            return True
        if (key, outside) not in self._outsiders:
            self._outsiders.add((key, outside))
            self.board.refuse("not_admitted", key, f"round-open of round {members.round} lists "
                              f"{list(outside)}, whose join the ledger did not accept")  # fmt: skip
        return False

    def exclude(self, round: int, nodes: tuple[str, ...]) -> None:
        """This node caught ``nodes`` feeding round ``round``'s all-reduce a packet other than the
        one they signed (trainer.round.commits): it opens and accepts no attempt of the round
        with them in it."""
        self.forgers = {r: f for r, f in self.forgers.items() if r >= round - 1}
        self.forgers.setdefault(round, set()).update(nodes)

    def _lists_forger(self, members: Members, key: str) -> bool:
        caught = self.forgers.get(members.round, set()) & set(members.addresses)
        if caught and (key, tuple(sorted(caught))) not in self._outsiders:
            self._outsiders.add((key, tuple(sorted(caught))))
            why = f"round-open of round {members.round} lists {sorted(caught)}, caught forging"
            self.board.refuse("forged_packet", key, why)
        return bool(caught)

    def keep(self, key: str, value: bytes, family: str, round: int) -> None:
        """Re-post ``key`` at a successor host if this one dies (:meth:`KeptValues.keep`)."""
        self.kept.keep(key, value, family, round)

    def latest_open(self) -> Members | None:
        """The verified round-open under ``current_round`` (a hint: the latest round opened)."""
        msg = self.board.read("current_round", Kind.ROUND_OPEN, None, None)
        return None if msg is None else self._members_of(msg, "current_round")

    def join(
        self,
        round: int,
        attempt: int = 0,
        *,
        window_s: float | None = None,
        timeout_s: float | None = None,
        expect: set[str] | None = None,
    ) -> Members:
        """Post a signed join for ``round`` and wait until its member list opens; return it."""
        if not self.board.registry.admits(self.address):
            raise ConfigError(
                f"node {self.address} is not registered and active on chain, so no member will "
                "accept its joins: register and stake it first (StakeManager)"
            )
        self._post_join(round, attempt)
        posted = time.monotonic()
        window = self.cfg.join_window_s if window_s is None else window_s
        timeout = self.cfg.rendezvous_timeout_s if timeout_s is None else timeout_s
        start = time.monotonic()
        watched: dict[str, bool] = {}
        awaited_since: dict[str, float] = {}
        while True:
            members = self.opened(round, attempt)
            if members is not None:
                self.last = members
                return members
            waited = time.monotonic() - start
            joins = self.valid_joins(round, attempt)
            caught = self.forgers.get(round, set())
            joins = {a: j for a, j in joins.items() if a not in caught}
            if self.address not in joins and time.monotonic() - posted > _REPOST_S:
                log.warning("round %d: this node's join is missing from the store; re-posting",
                            round)  # fmt: skip
                self._post_join(round, attempt)
                posted = time.monotonic()
            # read after the joins: an honest node posts its join only once the ledger took its
            # own, so every join read above is in this view already
            ledger = self.ledger(round) if self.ledger is not None else None
            if ledger is not None:  # only joins the ledger accepted make the member list
                joins = {a: j for a, j in joins.items() if a in ledger.members}
                if ledger.started and self.address not in ledger.members:
                    log.warning("round %d: the ledger's members are final without this node; "
                                "it trains from the next round", round)  # fmt: skip
                    return Members(round, attempt, ())
            present = set(joins)
            expected = expect if expect is not None else self._expected(round, attempt)
            final = ledger is not None and ledger.started and expect is None and attempt == 0
            if ledger is not None and final:  # the ledger's members are fixed: exactly those
                expected = set(ledger.members) - self._leaving(round, set(ledger.members))
            elif ledger is not None and isinstance(expected, set):
                expected = expected | ledger.members  # and those it took so far are coming
            expected = without_silent(self.liveness, self.address, expected, present, watched)
            if caught and isinstance(expected, set):  # nor for a member caught forging
                expected = expected - caught
            absent = set() if ledger is None else self._no_show(round, ledger.members - present,
                                                                awaited_since)  # fmt: skip
            absent |= caught
            complete = (
                len(present) >= expected
                and (ledger is None or ledger.members - absent <= present)
                if isinstance(expected, int) else expected - absent <= present
            )  # fmt: skip
            ready = complete and (final or waited >= window) and self.address in present
            if ready or waited >= timeout:
                if not complete:
                    missing = (tuple(sorted(expected - present)) if isinstance(expected, set)
                               else (f"{expected - len(present)} more nodes",))  # fmt: skip
                    log.warning("round %d: opening at the timeout without %s", round, missing)
                    self.timeouts.append((round, attempt, missing))
                self._try_open(round, attempt, joins)
            time.sleep(_POLL_S)

    def _no_show(self, round: int, missing: AbstractSet[str], since: dict[str, float]
                 ) -> set[str]:  # fmt: skip
        gone = overdue(round, missing - {self.address}, since, self.cfg.no_show_s)
        self.no_shows.extend((round, a) for a in sorted(gone) if (round, a) not in self.no_shows)
        return gone

    def _try_open(self, round: int, attempt: int, joins: dict[str, SignedMessage]) -> None:
        if self.address not in joins:
            return  # only a member may open the round
        heads = [int(j.body().get("head", 0)) for j in joins.values()]
        block = max([int(self.head()), *heads])
        wires = [joins[a].to_wire().decode() for a in sorted(joins)]
        opening = self.board.sign(Kind.ROUND_OPEN, round, attempt,
                                  {"joins": wires, "config_block": block}).to_wire()  # fmt: skip
        key = f"{self._prefix(round, attempt)}/open"
        winner = self.store.compare_set(key, "", opening)
        if winner != opening and self.opened(round, attempt) is None:
            log.warning("round %d: replacing a refused value under %s", round, key)
            winner = self.store.compare_set(key, winner, opening)
        if winner == opening:
            self.kept.set("current_round", opening)
            log.info("round %d members opened: %s (config block %d)", round, sorted(joins), block)

    def announce_leave(self, next_round: int) -> None:
        """Tell the others not to wait for this node in ``next_round`` (signed)."""
        self.board.post(f"leave/{next_round}/{self.address}", Kind.LEAVE, next_round, 0, {})

    def current_round(self) -> int:
        """The latest round whose signed member list opened (0 if none is readable)."""
        latest = self.latest_open()
        return 0 if latest is None else latest.round

    def round_members(self, round: int) -> Members | None:
        """The latest opened attempt of ``round`` that the store holds (a member that finished
        the round in a re-formed attempt, e.g. after a failover, is followed there), else this
        node's own list of that round."""
        for attempt in reversed(range(MAX_ATTEMPTS)):
            if self.store.check([f"{self._prefix(round, attempt)}/open"]):
                found = self.opened(round, attempt)
                if found is not None:
                    return found
        if self.last is not None and self.last.round == round:
            return self.last
        return None

    # --- process group ---------------------------------------------------------------------

    def form_group(self, members: Members, device: torch.device) -> RoundGroup:
        """A fresh process group over ``members`` (this node must be one of them)."""
        timeout_s, backend = self.cfg.collective_timeout_s, self.cfg.backend
        return form_group(self.store, members, self.address, device, timeout_s=timeout_s,
                          backend=backend)  # fmt: skip
