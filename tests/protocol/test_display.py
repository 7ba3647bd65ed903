"""protocol.display: the one way amounts and times are shown (dashboard, gov ranges)."""

from __future__ import annotations

from datetime import UTC, datetime

from protocol import display
from protocol.display import cms, eth, relative, units, utc


def test_amounts_in_units_with_at_most_four_decimals_at_any_size() -> None:
    assert units(1_234_500_000_000_000_000_000) == "1,234.5"
    assert eth(25 * 10**14) == "0.0025 ETH" and cms(750 * 10**18) == "750 CMS"
    assert units(10**13) == "<0.0001" and units(0) == "0" and units(-5 * 10**17) == "-0.5"
    assert units(2**256 - 1).endswith(",457.584")  # uint256 max: exact, no overflow
    assert units(80 * 10**18 - 2) == "80" and units(12_345 * 10**13) == "0.1235"  # nearest
    assert cms(None) == "?" and cms("3000000000000000000") == "3 CMS"


def test_times_in_utc_and_relative_to_the_chain_clock() -> None:
    assert utc(1796182109) == "2026-12-02 03:28 UTC"
    assert utc(datetime(2026, 12, 3, 14, 5, 59, tzinfo=UTC)) == "2026-12-03 14:05 UTC"
    assert utc("2026-12-03T14:05:00+00:00") == "2026-12-03 14:05 UTC" and utc(None) == "-"
    assert relative(190, 100, future="ends", past="ended") == "ends in 1m 30s"
    assert relative(100, 7300, future="opens", past="opened") == "opened 2h ago"


def test_rates_and_sizes_in_human_units() -> None:
    assert display.si(50 * 10**12, "FLOP/s") == "50 TFLOP/s"
    assert display.si(1_250_000_000, "bit/s") == "1.25 Gbit/s"
    assert display.si(999, "bit/s") == "999 bit/s"
    assert display.binary_bytes(80 * 2**30) == "80 GiB"
    assert display.binary_bytes(1536) == "1.5 KiB"
    assert display.binary_bytes(12) == "12 B"
