"""One leader among the ledger's workers: it alone indexes, closes, scores and settles.

On PostgreSQL several uvicorn workers (or machines) share one database; each serves the API,
and the one holding a session-level advisory lock runs the lifecycle. The lock lives as long
as the leader's connection: a leader that dies (or loses its connection) frees it, and the
next worker to try takes over. SQLite runs one worker, always the leader.
"""

from __future__ import annotations

import logging

from sqlalchemy import Connection, Engine, text

log = logging.getLogger(__name__)

# pg_advisory_lock key: int64 of b"coloco-L" (one ledger per database)
LOCK_KEY = int.from_bytes(b"coloco-L", "big") - (1 << 63)


class Leadership:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._conn: Connection | None = None

    @property
    def shared(self) -> bool:
        """Whether other workers may share the database (PostgreSQL)."""
        return self.engine.dialect.name == "postgresql"

    def held(self) -> bool:
        """Whether this worker leads now (tries to take the lock when nobody holds it)."""
        if not self.shared:
            return True
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT 1"))
                self._conn.commit()
                return True
            except Exception as exc:  # the connection (and with it the lock) is gone
                log.warning("lost the leader lock's connection: %s", exc)
                self._drop()
        conn = self.engine.connect()
        try:
            got = bool(
                conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": LOCK_KEY}).scalar()
            )
            conn.commit()
        except Exception:
            conn.close()
            raise
        if not got:
            conn.close()
            return False
        self._conn = conn
        log.info("this worker leads: it indexes, closes, scores and settles")
        return True

    def release(self) -> None:
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LOCK_KEY})
                self._conn.commit()
            except Exception as exc:
                log.warning("releasing the leader lock failed: %s", exc)
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.invalidate()  # never back into the pool: it may still hold the lock
                conn.close()
            except Exception:
                pass
