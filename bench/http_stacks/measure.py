"""Running one server under load and reading what it cost: process start/stop, CPU meters.

Why a module of its own: the stack comparison (run.py) and the PostgreSQL reference share
it, and the machine is shared with other engineers' work, so every figure carries the CPU that
processes other than the server and the load driver used meanwhile (`other_cores`): a run
disturbed by someone else's job is visible as such instead of passing as a slow stack.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


@dataclass(frozen=True)
class Target:
    """A server to measure: how to start it on a port, with which environment."""

    name: str
    argv: list[str]
    """The command line; `{port}` in an argument is replaced by the chosen port."""
    env: dict[str, str] = field(default_factory=dict)
    commit_path: str = "/v1/commit"

    def command(self, port: int) -> list[str]:
        """The argv with the port filled in."""
        return [a.replace("{port}", str(port)) for a in self.argv]


def free_port() -> int:
    """A loopback port nobody listens on now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine_busy_s() -> float:
    """CPU seconds all cores spent not idle since boot (from /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and all its live descendants (granian's workers)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def own_cpu_s() -> float:
    """CPU seconds of this process plus its finished children (wrk runs are children)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class CpuMeter:
    """CPU used by the server, by this driver (with wrk), and by everything else, over a span."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self._start = self._read()

    def _read(self) -> tuple[float, float, float, float]:
        return time.perf_counter(), tree_cpu_s(self.server_pid), own_cpu_s(), machine_busy_s()

    def stop(self) -> dict[str, float]:
        """Seconds of wall, server CPU and driver CPU since the meter started; other cores."""
        end = self._read()
        wall, server, driver, busy = (b - a for a, b in zip(self._start, end, strict=True))
        return {"wall_s": wall, "server_cpu_s": server, "driver_cpu_s": driver,
                "other_cores": max(0.0, busy - server - driver) / wall if wall > 0 else 0.0}


def wait_for_quiet(max_cores: float = 0.3, max_wait_s: float = 900.0, probe_s: float = 2.0) -> float:
    """Wait until other processes use under `max_cores` over a probe; the last reading.

    Why: a 2-core machine shared with test suites; a run beside a busy neighbour measures the
    neighbour. Gives up after `max_wait_s` (the figures then carry the load in `other_cores`).
    """
    deadline = time.monotonic() + max_wait_s
    while True:
        t0, b0 = time.perf_counter(), machine_busy_s()
        time.sleep(probe_s)
        cores = (machine_busy_s() - b0) / (time.perf_counter() - t0)
        if cores < max_cores or time.monotonic() > deadline:
            return cores
        print(f"  (machine busy: {cores:.2f} cores used by others; waiting)", file=sys.stderr, flush=True)
        time.sleep(10)


def get(url: str, timeout: float = 1.0) -> int:
    """The status of a GET (0 when nothing answers); an https URL's certificate is not checked."""
    ctx = None
    if url.startswith("https:"):
        import ssl

        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as resp:
            return resp.status
    except OSError:
        return 0


class RunningServer:
    """A target started as a child process, answering /healthz; stopped with SIGTERM."""

    def __init__(self, target: Target, log_path: Path, extra_env: dict[str, str] | None = None,
                 start_timeout_s: float = 30.0, health_scheme: str = "http") -> None:
        self.target = target
        self.port = free_port()
        self.base_url = f"{health_scheme}://127.0.0.1:{self.port}"
        env = {**os.environ, **target.env, **(extra_env or {})}
        env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
        with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(target.command(self.port), env=env, cwd=REPO,
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + start_timeout_s
        while get(self.base_url + "/healthz") != 200:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{target.name} did not answer /healthz (see {log_path})")
            time.sleep(0.1)

    @property
    def commit_url(self) -> str:
        return self.base_url + self.target.commit_path

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM, then wait; SIGKILL after `timeout_s`. The exit code (None if killed)."""
        code: int | None = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        else:
            code = self.proc.returncode
        return code

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
