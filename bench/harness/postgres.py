"""A real, throwaway PostgreSQL server for tests and benchmarks: initdb in a temp folder, a free
loopback port.

initdb refuses to run as root, so as root it runs as the `postgres` user (runuser). The server
listens on 127.0.0.1 only, with fsync off (test data is disposable) unless started ``durable``
(fsync, full_page_writes and synchronous_commit on: what benchmarks of durable commits need).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from protocol.devnet import free_port


def pg_bin(name: str) -> str:
    """The path of PostgreSQL's program ``name``: on PATH, else Debian's newest server folder."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if not candidates:
        raise RuntimeError(
            f"PostgreSQL's {name} not found: install the server (`apt-get install postgresql`); "
            "`make setup` does this on Debian"
        )
    return str(candidates[-1])


def as_postgres(argv: list[str]) -> list[str]:
    """``argv`` run as the `postgres` user when we are root (initdb and the server refuse root)."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return argv


@dataclass
class PostgresServer:
    datadir: Path
    port: int
    user: str
    opts: str = ""  # the postgres options it was started with (resume uses them again)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/postgres"

    @classmethod
    def start(cls, *, durable: bool = False) -> PostgresServer:
        root = Path(tempfile.mkdtemp(prefix="coloco-pg-"))
        datadir = root / "data"
        datadir.mkdir()
        user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
        if os.geteuid() == 0:
            shutil.chown(root, "postgres")
            shutil.chown(datadir, "postgres")
        subprocess.run(
            as_postgres(
                [
                    pg_bin("initdb"),
                    "-D",
                    str(datadir),
                    "-U",
                    user,
                    "-A",
                    "trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                ]
            ),
            check=True,
            capture_output=True,
        )
        port = free_port()
        safety = (
            "-c fsync=on -c full_page_writes=on -c synchronous_commit=on"
            if durable
            else "-c fsync=off -c full_page_writes=off"
        )
        opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 {safety}"
        subprocess.run(
            as_postgres(
                [
                    pg_bin("pg_ctl"),
                    "-D",
                    str(datadir),
                    "-o",
                    opts,
                    "-l",
                    str(root / "server.log"),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
        )
        server = cls(datadir=datadir, port=port, user=user, opts=opts)
        server._wait_ready()
        return server

    def _wait_ready(self, timeout: float = 30.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(
                    host="127.0.0.1",
                    port=self.port,
                    user=self.user,
                    dbname="postgres",
                    connect_timeout=2,
                ):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def create_database(self, name: str) -> str:
        """A fresh database on this server; returns its SQLAlchemy URL."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=self.user, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{name}"

    def halt(self) -> None:
        """Shut the server down (fast: sessions are cut) and keep its data: :meth:`resume`."""
        subprocess.run(
            as_postgres([pg_bin("pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w", "stop"]),
            check=True,
            capture_output=True,
        )

    def resume(self) -> None:
        """Start the halted server again on the same port and data."""
        root = self.datadir.parent
        subprocess.run(
            as_postgres([pg_bin("pg_ctl"), "-D", str(self.datadir), "-o", self.opts,
                          "-l", str(root / "server.log"), "-w", "-t", "60", "start"]),
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._wait_ready()

    def stop(self) -> None:
        subprocess.run(
            as_postgres(
                [pg_bin("pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "-w", "stop"]
            ),
            check=False,
            capture_output=True,
        )
        shutil.rmtree(self.datadir.parent, ignore_errors=True)
