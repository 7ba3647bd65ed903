"""The round's config: every member reads TrainingConfig itself, at the round's agreed block.

The block comes from the signed round-open (at least every member's chain head when it joined,
so a closer cannot roll governance back). Each member waits until its own chain reaches that
block, reads the config there, and posts a signed ``CONFIG`` read-out (the hash of the governed
fields). It then collects the other members' read-outs:

- all agree: train;
- a strict majority agrees with this node: the round re-forms (next attempt) with that majority;
- otherwise, or when this node's chain never reached the block within ``config_wait_s``: this
  node sits the round out (posting a signed sit-out so nobody waits for it).

No node ever trains with a config another node read: a read-out carries a hash, never settings.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from protocol.coordination import Kind, SignedMessage
from reference import settings
from trainer.network.members import Members
from trainer.network.membership import Rendezvous
from trainer.round.runconfig import ConfigSource, RunConfig

log = logging.getLogger(__name__)

_POLL_S = 0.1


def _polls(seconds: float) -> int:
    """Waits are counted in polls, not wall time: a node paused (SIGSTOP) and resumed does not
    find its deadline passed before it looked again."""
    return max(1, int(seconds / _POLL_S))


def governed_hash(config: RunConfig) -> str:
    """keccak256 of the governed settings (the node's own batch size left out), as hex."""
    return settings.governed_hash(config.governed())


@dataclass(frozen=True)
class Verdict:
    config: RunConfig | None
    agree: frozenset[str]
    """Members whose read-out matched this node's (this node included)."""

    @property
    def sit_out(self) -> bool:
        return self.config is None


class ConfigAgreement:
    def __init__(self, rdv: Rendezvous, source: ConfigSource, wait_s: float) -> None:
        self.rdv = rdv
        self.source = source
        self.wait_s = wait_s

    def _read_at(self, round: int, block: int) -> RunConfig | None:
        polls = _polls(self.wait_s)
        warned = False
        while True:
            head = int(self.source.head())
            if head >= block:
                return self.source.read(block)
            if not warned:
                log.warning("round %d: this node's chain is at block %d, the round reads its "
                            "config at block %d; waiting (never using another node's copy)",
                            round, head, block)  # fmt: skip
                self.rdv.board.refuse(
                    "chain_behind", f"config/{round}", f"own chain at {head} < round block {block}"
                )
                warned = True
            polls -= 1
            if polls < 0:
                return None
            time.sleep(_POLL_S)

    def settle(self, members: Members) -> Verdict:
        r, a, me = members.round, members.attempt, self.rdv.address
        own = self._read_at(r, members.config_block)
        key = f"config/{r}/{a}/{me}"
        if own is None:
            log.warning("round %d: chain never reached block %d within %.0fs; sitting the round "
                        "out", r, members.config_block, self.wait_s)  # fmt: skip
            sit_out = self.rdv.board.post(key, Kind.CONFIG, r, a, {"sit_out": True})
            self.rdv.keep(key, sit_out.to_wire(), "config/", r)
            return Verdict(None, frozenset())
        mine = governed_hash(own)
        payload = {"hash": mine, "version": own.version, "block": members.config_block}
        posted = self.rdv.board.post(key, Kind.CONFIG, r, a, payload).to_wire()
        self.rdv.keep(key, posted, "config/", r)  # re-posted at a successor if the host dies
        reads: dict[str, SignedMessage] = {}
        polls = _polls(2 * self.wait_s)
        while True:
            for m in members.addresses:
                if m in reads:
                    continue
                msg = self.rdv.board.read(f"config/{r}/{a}/{m}", Kind.CONFIG, r, a, signer=m)
                if msg is not None:
                    reads[m] = msg
                elif m == me:
                    self.rdv.store.set(key, posted)  # overwritten by someone: post it again
            polls -= 1
            if len(reads) == len(members.addresses) or polls < 0:
                break
            time.sleep(_POLL_S)
        agree = frozenset(m for m, msg in reads.items() if msg.body().get("hash") == mine)
        others = {m: msg.body().get("hash", "sit out") for m, msg in reads.items()}
        if len(agree) == len(members.addresses):
            return Verdict(own, agree)
        missing = sorted(set(members.addresses) - set(reads))
        log.warning("round %d: config read-outs differ or are missing (mine %s.., theirs %s, "
                    "missing %s)", r, mine[:12], others, missing)  # fmt: skip
        if 2 * len(agree) > len(members.addresses):
            return Verdict(own, agree)
        self.rdv.board.refuse("config_disagreement", key,
                              f"only {len(agree)} of {len(members.addresses)} members read "
                              "the config this node read; sitting the round out")  # fmt: skip
        return Verdict(None, agree)
