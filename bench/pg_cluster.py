"""A throwaway PostgreSQL cluster for the benchmarks: initdb in a temp dir, stopped and deleted on exit.

Why: the server's target is stated against "a reference server that stores into PostgreSQL",
so the bench needs a real PostgreSQL (Debian's package) that it starts itself, with durability
on (fsync, synchronous_commit), bound to loopback and a socket dir of its own, and that leaves
nothing behind. PostgreSQL refuses to run as root, so as root it runs as the `postgres` user
(from Debian's package) or, failing that, `nobody`.

    with pg_cluster() as pg:
        print(pg.dsn)   # postgresql://bench@/bench?host=<socket dir>&port=<port>
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

USER = "bench"
DATABASE = "bench"

DURABLE_SETTINGS: dict[str, str] = {
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "shared_buffers": "256MB",
    "max_connections": "200",
    "max_wal_size": "2GB",  # no checkpoint forced by WAL volume within a run
}
"""Durability as the issue states it, with the sizes a competent operator would give a bench."""


class PostgresMissing(RuntimeError):
    """No PostgreSQL server binaries: the reference server cannot run."""


@dataclass(frozen=True)
class PgCluster:
    """A running cluster: where to connect and what runs it."""

    bin_dir: Path
    data_dir: Path
    socket_dir: Path
    port: int
    version: str
    os_user: str

    @property
    def dsn(self) -> str:
        """A libpq URI over the unix socket (asyncpg and psycopg both take it)."""
        return f"postgresql://{USER}@/{DATABASE}?host={self.socket_dir}&port={self.port}"

    @property
    def tcp_dsn(self) -> str:
        """The same database over TCP on 127.0.0.1."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{DATABASE}"

    def psql(self, sql: str) -> str:
        """Run `sql` with psql (unaligned, tuples only) and return its output."""
        out = subprocess.run(
            [str(self.bin_dir / "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h",
             str(self.socket_dir), "-p", str(self.port), "-U", USER, "-d", DATABASE, "-c", sql],
            capture_output=True, text=True, check=True)
        return out.stdout.strip()


def find_bin_dir() -> Path:
    """The newest /usr/lib/postgresql/*/bin holding initdb and postgres, or PostgresMissing."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")
             if (Path(p).parent / "postgres").exists()]
    if not found:
        raise PostgresMissing(
            "PostgreSQL server binaries (initdb, postgres) were not found under "
            "/usr/lib/postgresql/*/bin: apt-get install postgresql")

    def major(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.parent.name))

    return max(found, key=major)


def _run_as() -> pwd.struct_passwd | None:
    """The account to run PostgreSQL under when we are root (None when we are not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PostgresMissing("running as root, and neither a `postgres` nor a `nobody` account "
                          "exists to run PostgreSQL as (it refuses root)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(bin_dir: Path, socket_dir: Path, port: int, proc: subprocess.Popen, log: Path,
                timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"postgres exited {proc.returncode} at start:\n{log.read_text()[-2000:]}")
        ready = subprocess.run([str(bin_dir / "pg_isready"), "-q", "-h", str(socket_dir), "-p", str(port)],
                               capture_output=True)
        if ready.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"postgres not ready after {timeout_s:.0f} s:\n{log.read_text()[-2000:]}")
        time.sleep(0.1)


@contextmanager
def pg_cluster(settings: dict[str, str] | None = None, parent_dir: Path | None = None,
               start_timeout_s: float = 60.0) -> Iterator[PgCluster]:
    """Start a fresh cluster (DURABLE_SETTINGS, then `settings`); stop it and delete its files on exit."""
    bin_dir = find_bin_dir()
    account = _run_as()
    as_user = {} if account is None else {"user": account.pw_uid, "group": account.pw_gid,
                                          "extra_groups": []}
    root = Path(tempfile.mkdtemp(prefix="pg-bench-", dir=parent_dir))
    proc: subprocess.Popen | None = None
    try:
        data_dir, socket_dir, log = root / "data", root / "sock", root / "postgres.log"
        socket_dir.mkdir()
        if account is not None:
            for p in (root, socket_dir):
                os.chown(p, account.pw_uid, account.pw_gid)
            if subprocess.run(["test", "-w", str(root)], **as_user).returncode != 0:
                raise RuntimeError(f"PostgreSQL runs as {account.pw_name}, who cannot enter {root}: "
                                   "give a parent_dir every user can traverse (the default is the temp dir)")
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        init = subprocess.run([str(bin_dir / "initdb"), "-D", str(data_dir), "-U", USER, "--auth=trust",
                               "-E", "UTF8", "--no-sync"],
                              capture_output=True, text=True, env=env, cwd=root, **as_user)
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed ({init.returncode}):\n{init.stderr or init.stdout}")
        port = _free_port()
        conf = {**DURABLE_SETTINGS, **(settings or {}), "listen_addresses": "127.0.0.1",
                "unix_socket_directories": str(socket_dir), "port": str(port)}
        args = [str(bin_dir / "postgres"), "-D", str(data_dir)]
        for k, v in conf.items():
            args += ["-c", f"{k}={v}"]
        with open(log, "wb") as logf:
            if account is not None:
                os.chown(log, account.pw_uid, account.pw_gid)
            proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=root,
                                    start_new_session=True, **as_user)
        _wait_ready(bin_dir, socket_dir, port, proc, log, start_timeout_s)
        subprocess.run([str(bin_dir / "createdb"), "-h", str(socket_dir), "-p", str(port), "-U", USER,
                        DATABASE], check=True, capture_output=True)
        version = subprocess.run([str(bin_dir / "postgres"), "--version"], capture_output=True,
                                 text=True).stdout.strip()
        yield PgCluster(bin_dir, data_dir, socket_dir, port, version,
                        account.pw_name if account else pwd.getpwuid(os.geteuid()).pw_name)
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # "fast" shutdown: roll back sessions, checkpoint, exit
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)
