"""Group commit in one writer thread: concurrent requests' attestations in one transaction.

Handlers verify on the event loop and hand their checked items here. While no write is in
flight, the first job starts one (a loop iteration later, so requests of the same iteration
join it); every job that arrives while a write is in flight waits for the next one, which takes
them all. Under load N single requests cost one commit instead of N. The transaction runs in a
dedicated thread, never on the event loop: a write that waits (for the pool, a lock, an fsync)
never stops the loop from answering reads or finishing requests that hold connections.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ledger.core.request_id import request_id
from ledger.intake.jobs import Job

log = logging.getLogger(__name__)

Group = list[tuple[Job, "asyncio.Future[None]"]]
MAX_GROUP_ITEMS = 2000  # one transaction's worth; the rest waits for the next write


class GroupWriter:
    """Groups jobs and hands each group to ``store`` (the intake's locked write) in its thread."""

    def __init__(self, store: Callable[[Job], None]) -> None:
        self.store = store
        self._pending: Group = []
        self._busy = False
        self._writes = 0
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="ledger-writer")

    @property
    def queue_depth(self) -> int:
        """Attestations waiting for the next write."""
        return sum(len(job.items) for job, _ in self._pending)

    async def write(self, job: Job) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending.append((job, future))
        if not self._busy:
            self._busy = True
            loop.call_soon(self._start, loop)
        await future

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        size, cut = 0, len(self._pending)
        for index, (job, _) in enumerate(self._pending):
            size += len(job.items)
            if size >= MAX_GROUP_ITEMS:
                cut = index + 1
                break
        group, self._pending = self._pending[:cut], self._pending[cut:]
        if not group:
            self._busy = False
            return
        merged = Job(items=[])
        offsets = []
        for job, _ in group:
            offset = len(merged.items)
            offsets.append(offset)
            merged.items.extend(job.items)
            merged.out.extend(o + offset if isinstance(o, int) else o for o in job.out)
            merged.checked.extend((i + offset, c) for i, c in job.checked)
            merged.rejections.extend(job.rejections)
        done = loop.run_in_executor(self._executor, self._write, merged)
        done.add_done_callback(lambda f: self._finish(loop, group, merged, offsets, f))

    def _write(self, merged: Job) -> None:
        self._writes += 1
        request_id.set(f"write-{self._writes}")  # one group serves many requests
        self.store(merged)

    def _finish(
        self,
        loop: asyncio.AbstractEventLoop,
        group: Group,
        merged: Job,
        offsets: list[int],
        done: asyncio.Future[None],
    ) -> None:
        exc = done.exception()
        if exc is not None:
            log.error("writing %d attestations failed", len(merged.items), exc_info=exc)
            for _, future in group:
                if not future.done():
                    future.set_exception(exc)
        else:
            results = merged.results()
            for (job, future), offset in zip(group, offsets, strict=True):
                job.out = list(results[offset : offset + len(job.items)])
                if not future.done():
                    future.set_result(None)
        self._start(loop)  # whatever arrived meanwhile is the next group
