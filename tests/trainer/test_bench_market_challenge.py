"""bench.market_challenge's machinery on real node processes: an honest claim passes, a claim of
twice the memory the process may use is refused and the node is started again, a claim of
twice its throughput misses the deadline (timing-free cases only: the figures are the bench's).

Two threads, as the bench runs on this machine: the address-space cap (RLIMIT_AS) is what
stands for "the memory it has", and with one thread a 2x claim was seen to fit under it."""

from __future__ import annotations

from bench import market_challenge as bm
from reference import challenge as ch


def test_honest_passes_twice_the_memory_fails_and_the_node_comes_back() -> None:
    node = bm.start(2, memory_limit=bm.HONEST_MEMORY)
    try:
        shape = ch.size(bm.HONEST_MEMORY)
        honest = bm.challenge([node], shape, 1.0)  # a deadline of hours
        assert honest.passed, honest.reasons
        first = node.proc.pid
        double = bm.challenge([node], ch.size(2 * bm.HONEST_MEMORY), 1.0)
        assert not double.passed and "no commitment" in double.reasons[0]
        assert node.proc.pid != first and node.proc.is_alive()  # out of memory, started again
        again = bm.challenge([node], shape, 1.0)
        assert again.passed, again.reasons
        impossible = bm.challenge([node], shape, 1e18)  # an exaFLOP/s claim
        assert not impossible.passed and "late" in impossible.reasons[0]
    finally:
        bm.stop([node])


def test_a_claims_verdict_is_refused_only_by_a_majority_of_its_challenges() -> None:
    assert ch.VERDICT_TRIALS == 3
    assert not ch.majority_refused([True, False, False])  # one late run: noise
    assert ch.majority_refused([True, True, False])  # late most times: a misclaim
    assert ch.majority_refused([True])
    late = bm.Outcome(False, ["late"], [2.0], 2.0, 0.0)
    ok = bm.Outcome(True, [], [1.0], 1.0, 0.0)
    assert bm.Verdict([late, ok, ok]).passed and not bm.Verdict([late, late, ok]).passed
