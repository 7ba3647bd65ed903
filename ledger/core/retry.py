"""Per-item failure isolation: a failing round or settlement waits (backoff), the others go on.

Each background step (scoring a round, advancing a settlement, a whole tick step) keeps a
:class:`Backoff` keyed by what failed. A failure is logged, counted and delayed (doubling up to
a cap); a success clears it. :meth:`Backoff.report` is what readiness and metrics show.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from protocol.errors import ColocoError

log = logging.getLogger(__name__)


def describe(exc: BaseException) -> str:
    """A short, secret-free description of an error (code and message, or its type)."""
    if isinstance(exc, ColocoError):
        return f"{exc.code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


@dataclass
class Failure:
    count: int
    next_at: float
    error: str


class Backoff:
    def __init__(
        self,
        what: str,
        *,
        base_s: float = 1.0,
        cap_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.base_s = base_s
        self.cap_s = cap_s
        self.clock = clock
        self.failures: dict[Hashable, Failure] = {}

    def due(self, key: Hashable) -> bool:
        """Whether ``key`` may be tried now (never failed, or its wait is over)."""
        failure = self.failures.get(key)
        return failure is None or self.clock() >= failure.next_at

    def failed(self, key: Hashable, exc: BaseException) -> float:
        """Record a failure of ``key``; return the wait before the next try."""
        previous = self.failures.get(key)
        count = previous.count + 1 if previous else 1
        delay = float(min(self.cap_s, self.base_s * 2 ** (count - 1)))
        error = describe(exc)
        self.failures[key] = Failure(count, self.clock() + delay, error)
        log.warning(
            "%s %s failed (%d in a row), retrying in %.0fs: %s",
            self.what,
            key,
            count,
            delay,
            error,
            exc_info=not isinstance(exc, ColocoError),
        )
        return delay

    def succeeded(self, key: Hashable) -> None:
        if self.failures.pop(key, None) is not None:
            log.info("%s %s recovered", self.what, key)

    def report(self) -> dict[str, str]:
        return {
            f"{self.what} {key}": f"{f.error} (failed {f.count}x)"
            for key, f in self.failures.items()
        }
