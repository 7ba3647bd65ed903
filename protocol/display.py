"""Amounts and times as a person reads them: one definition for the dashboard and the CLI.

Token amounts (CMS, 18 decimals) and ETH are shown with sensible decimals (`1,234.5 CMS`,
`0.0025 ETH`, `<0.0001 ETH`), never as raw wei; chain times (unix seconds) in UTC
(`2026-12-03 14:05 UTC`) and relative to the chain's clock (`ends in 1m 30s`).
"""

from __future__ import annotations

from datetime import UTC, datetime

DECIMALS = 18
PLACES = 4  # decimals shown of an amount; a smaller non-zero amount reads `<0.0001`


def units(value: int | str, decimals: int = DECIMALS, places: int = PLACES) -> str:
    """1234500000000000000000 -> '1,234.5': a token amount in whole units, at most `places`
    decimals (rounded to the nearest; a smaller non-zero amount reads '<0.0001'), thousands
    separated."""
    amount = int(value)
    sign = "-" if amount < 0 else ""
    # integers: exact at any size (uint256); rounded to the nearest 10^-places
    scaled = (abs(amount) * 10**places + 10**decimals // 2) // 10**decimals
    whole, rest = divmod(scaled, 10**places)
    frac = f"{rest:0{places}d}".rstrip("0")
    if scaled == 0 and amount:
        return f"{sign}<0.{'0' * (places - 1)}1"
    return f"{sign}{whole:,}" + (f".{frac}" if frac else "")


def cms(value: int | str | None) -> str:
    """An amount of the model's share token (18 decimals) -> '750 CMS'; None -> '?'."""
    return "?" if value is None else f"{units(value)} CMS"


def eth(value: int | str | None) -> str:
    """An amount in wei -> '2 ETH' / '0.0025 ETH'; None -> '?'."""
    return "?" if value is None else f"{units(value)} ETH"


def utc(moment: int | datetime | str | None, *, seconds: bool = False) -> str:
    """A unix time, datetime or ISO string -> '2026-12-03 14:05 UTC'; None -> '-'."""
    if moment is None:
        return "-"
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if isinstance(moment, int):
        moment = datetime.fromtimestamp(moment, tz=UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    pattern = "%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC"
    return moment.astimezone(UTC).strftime(pattern)


def span(seconds: int) -> str:
    """90 -> '1m 30s': a duration, its two largest parts."""
    seconds = abs(int(seconds))
    parts = [(seconds // 86400, "d"), (seconds % 86400 // 3600, "h"),
             (seconds % 3600 // 60, "m"), (seconds % 60, "s")]  # fmt: skip
    return " ".join([f"{n}{unit}" for n, unit in parts if n][:2]) or "0s"


def relative(timestamp: int, now: int, *, future: str, past: str) -> str:
    """'ends in 1m 30s' before `timestamp`, 'ended 2h ago' after it (`now`: the chain's clock)."""
    if timestamp > now:
        return f"{future} in {span(timestamp - now)}"
    return f"{past} {span(now - timestamp)} ago"


_SI = ((10**18, "E"), (10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k"))
_BINARY = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def si(value: int | str, unit: str) -> str:
    """50000000000000, 'FLOP/s' -> '50 TFLOP/s'; 10**9, 'bit/s' -> '1 Gbit/s' (3 significant
    digits at most, exact below 1000)."""
    amount = int(value)
    for scale, prefix in _SI:
        if amount >= scale:
            return f"{amount / scale:.3g} {prefix}{unit}"
    return f"{amount} {unit}"


def binary_bytes(value: int | str) -> str:
    """85899345920 -> '80 GiB' (3 significant digits at most)."""
    amount = int(value)
    for scale, unit in _BINARY:
        if amount >= scale:
            return f"{amount / scale:.3g} {unit}"
    return f"{amount} B"
