"""Database engine: SQLite (WAL, synchronous NORMAL or FULL) by default, PostgreSQL by URL."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.pool import StaticPool
from sqlmodel import Session, SQLModel, create_engine

from protocol.errors import ConfigError

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
# a pooled PostgreSQL connection idle longer than this is pinged before use; one returned more
# recently is handed out as is (a ping per checkout is a round trip per request under load)
PING_IDLE_S = 1.0


def normalize_url(url: str) -> str:
    """Map plain ``postgresql://`` URLs to the psycopg 3 driver; refuse unknown schemes."""
    if url.startswith(("postgres://", "postgresql://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith(("sqlite:", "postgresql+psycopg://")):
        return url
    raise ConfigError(
        f"unsupported database URL {url.split('://', 1)[0]!r}: use sqlite:///path.db "
        "or postgresql://user@host:port/db"
    )


def _sqlite_pragmas(synchronous: str) -> Any:
    def connect(dbapi_conn: Any, _record: Any) -> None:
        _apply_pragmas(dbapi_conn, synchronous)

    return connect


def _apply_pragmas(dbapi_conn: Any, synchronous: str) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    # NORMAL: a commit survives a process kill, not a power loss; FULL: the WAL is fsynced at
    # every commit (durable), at the cost of an fsync per group commit
    cur.execute(f"PRAGMA synchronous={'FULL' if synchronous == 'FULL' else 'NORMAL'}")
    # checkpoints (the only fsyncs in WAL + NORMAL) run in the background worker, not in the
    # request path: see checkpoint()
    cur.execute("PRAGMA wal_autocheckpoint=0")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


# connections the process uses besides the API's threads: the writer thread, the lifecycle
# worker, the leader lock, one spare
INTERNAL_CONNECTIONS = 4


def make_engine(url: str, *, threads: int = 16, sqlite_synchronous: str = "NORMAL") -> Engine:
    """An engine whose pool holds a connection for each request session (at most ``threads``
    at once: :func:`ledger.api.deps.get_db`), one for each of ``threads`` API threads (what a
    route opens itself), and the process's own users (:data:`INTERNAL_CONNECTIONS`): no thread
    ever waits for the pool while another holds the connection it needs (a pool smaller than
    its users can deadlock them). PostgreSQL: ``max_connections`` >= workers x
    (2 x threads + 2 x INTERNAL_CONNECTIONS)."""
    url = normalize_url(url)
    pool: dict[str, Any] = {
        "pool_size": 2 * threads + INTERNAL_CONNECTIONS,
        "max_overflow": INTERNAL_CONNECTIONS,
        "pool_timeout": 30,
        # the most recently returned first: the busy few stay warm (their prepared statements),
        # the rest idle (and are pinged before reuse: _ping_if_idle)
        "pool_use_lifo": True,
    }
    if url.startswith("sqlite"):
        kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
        if ":memory:" in url or url in ("sqlite://", "sqlite:///"):
            kwargs["poolclass"] = StaticPool
        else:
            kwargs.update(pool)
        engine = create_engine(url, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas(sqlite_synchronous))
        return engine
    engine = create_engine(url, **pool)
    event.listen(engine, "checkin", _mark_checkin)
    event.listen(engine, "checkout", _ping_if_idle(engine))
    return engine


def _mark_checkin(_dbapi_conn: Any, record: Any) -> None:
    if record is not None:
        record.info["checked_in_at"] = time.monotonic()


def _ping_if_idle(engine: Engine) -> Any:
    """``pool_pre_ping``, but only for connections idle longer than :data:`PING_IDLE_S`.

    A failed ping raises :class:`DisconnectionError`: the pool discards the connection and
    checks out a fresh one (SQLAlchemy's pessimistic disconnect handling).
    """

    def checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        last = record.info.get("checked_in_at")
        if last is not None and time.monotonic() - last < PING_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:
            log.warning("pooled database connection is dead, reconnecting: %s", exc)
            raise DisconnectionError() from exc

    return checkout


def checkpoint(engine: Engine) -> None:
    """Fold SQLite's write-ahead log into the database (PASSIVE: never blocks writers)."""
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")


def create_all(engine: Engine) -> None:
    """Development/test shortcut; production runs migrations (:func:`upgrade`)."""
    from ledger.core import models  # noqa: F401 - registers the tables

    SQLModel.metadata.create_all(engine)


def alembic_config(url: str) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Apply schema migrations up to ``revision``."""
    from alembic import command

    log.info("migrating database to %s", revision)
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
