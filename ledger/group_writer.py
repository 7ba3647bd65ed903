"""Group commit: concurrent requests' attestations written in one transaction.

The API's handlers verify on the event loop and hand their checked items to this writer; one
thread takes every job waiting, merges them into one :class:`~ledger.intake.Job`, writes it in
one transaction under the intake lock, and completes each job's future. Under load, N single
requests cost one commit instead of N; alone, a request waits for nothing.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger.intake import Intake, Job

log = logging.getLogger(__name__)

MAX_GROUP_ITEMS = 2000


class GroupWriter:
    def __init__(self, intake: Intake) -> None:
        self.intake = intake
        self._queue: queue.Queue[tuple[Job, Future[None]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def enqueue(self, job: Job) -> Future[None]:
        future: Future[None] = Future()
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="ledger-intake-writer", daemon=True
                    )
                    self._thread.start()
        self._queue.put((job, future))
        return future

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            group = [first]
            size = len(first[0].items)
            while size < MAX_GROUP_ITEMS:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                group.append(nxt)
                size += len(nxt[0].items)
            self._write(group)

    def _write(self, group: list[tuple[Job, Future[None]]]) -> None:
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
                self.intake._write(merged)
        except BaseException as exc:
            log.exception("writing %d attestations failed", len(merged.items))
            for _, future in group:
                future.set_exception(exc)
            return
        results = merged.results()
        for (job, future), offset in zip(group, offsets, strict=True):
            job.out = list(results[offset : offset + len(job.items)])
            future.set_result(None)
