"""Group commit on the event loop: concurrent requests' attestations in one transaction.

Handlers verify on the event loop and hand their checked items here. The first job of a group
schedules a flush a couple of loop iterations later; every job that arrives meanwhile joins it,
and the flush writes them all in one transaction (under the intake lock) and resolves each
job's future. Under load, N single requests cost one commit instead of N; alone, a request waits
two loop iterations. Running on the loop thread (not a writer thread) avoids GIL hand-offs
between threads, which cost more than the writes on a busy core.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger.intake import Intake, Job

log = logging.getLogger(__name__)

MAX_GROUP_ITEMS = 2000
_HOPS = 2


class GroupWriter:
    def __init__(self, intake: Intake) -> None:
        self.intake = intake
        self._pending: list[tuple[Job, asyncio.Future[None]]] = []
        self._size = 0
        self._scheduled = False

    async def write(self, job: Job) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending.append((job, future))
        self._size += len(job.items)
        if self._size >= MAX_GROUP_ITEMS:
            self._flush(0)
        elif not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush, _HOPS)
        await future

    def _flush(self, hops: int) -> None:
        if hops > 0 and self._pending:
            asyncio.get_running_loop().call_soon(self._flush, hops - 1)
            return
        self._scheduled = False
        group, self._pending, self._size = self._pending, [], 0
        if not group:
            return
        from ledger.intake import Job

        merged = Job(items=[])
        offsets = []
        for job, _ in group:
            offset = len(merged.items)
            offsets.append(offset)
            merged.items.extend(job.items)
            merged.out.extend(o + offset if isinstance(o, int) else o for o in job.out)
            merged.checked.extend((i + offset, c) for i, c in job.checked)
            merged.rejections.extend(job.rejections)
        try:
            with self.intake.lock:
                self.intake.write(merged)
        except Exception as exc:
            log.exception("writing %d attestations failed", len(merged.items))
            for _, future in group:
                if not future.done():
                    future.set_exception(exc)
            return
        results = merged.results()
        for (job, future), offset in zip(group, offsets, strict=True):
            job.out = list(results[offset : offset + len(job.items)])
            if not future.done():
                future.set_result(None)
