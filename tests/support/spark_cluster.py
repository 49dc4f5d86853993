"""A real standalone Spark cluster on loopback, from the pyspark wheel: one Master and Workers
started with `spark-class`, as the README's "Spark master" section runs them by hand.

Ports are 0 (the Master's is read from its log), the REST submission server is off, and every
process is started in its own session so that `stop` ends a Worker with the executors it
launched (by that process group only). The tests share one cluster per pytest session; the
bench starts its own.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
WORKER_REGISTERED = "Registering worker"
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 30.0


def spark_home() -> Path:
    """The Spark distribution inside the pyspark wheel."""
    import pyspark

    return Path(pyspark.__file__).parent


def cluster_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the cluster's processes and of a driver that uses it: loopback
    addresses and this interpreter for the Python workers."""
    env = dict(os.environ if base is None else base)
    env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return env


@dataclass
class StandaloneCluster:
    """A running Master and its Workers."""

    master_url: str
    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    started_s: float = 0.0

    @property
    def env(self) -> dict[str, str]:
        """The environment a driver process of this cluster runs with."""
        return cluster_env()

    def stop(self) -> None:
        """SIGTERM to each process group (Workers first, then the Master), SIGKILL after a
        timeout: nothing of the cluster is left running."""
        for proc in reversed(self.processes):
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in reversed(self.processes):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT_S)
        for proc in self.processes:  # executors outliving their Worker, if any
            _signal_group(proc, signal.SIGKILL)
        self.processes.clear()


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group exited already
        os.killpg(proc.pid, sig)  # the group this process leads (start_new_session)


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args], stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=cluster_env(),
            start_new_session=True)


def _wait_for(log: Path, proc: subprocess.Popen[bytes], ready, what: str, deadline: float):
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        found = ready(text)
        if found:
            return found
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{text[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {START_TIMEOUT_S} s:\n{text[-3000:]}")
        time.sleep(0.2)


def start_cluster(workdir: Path, workers: int = 2, cores: int = 1,
                  memory: str = "1g") -> StandaloneCluster:
    """A Master on 127.0.0.1 (ports picked by the system, REST off) and `workers` Workers of
    `cores` cores and `memory` each, all registered when this returns."""
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = started + START_TIMEOUT_S
    master_log = workdir / "master.log"
    (workdir / "master.conf").write_text("spark.master.rest.enabled false\n")
    master = _spawn([MASTER_CLASS, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                     "--properties-file", str(workdir / "master.conf")], master_log)
    cluster = StandaloneCluster(master_url="", workdir=workdir, processes=[master])
    try:
        match = _wait_for(master_log, master, MASTER_URL.search, "the Spark master", deadline)
        cluster.master_url = match.group(1)
        for i in range(workers):
            cluster.processes.append(_spawn(
                [WORKER_CLASS, cluster.master_url, "--cores", str(cores), "--memory", memory,
                 "--webui-port", "0", "--work-dir", str(workdir / f"worker-{i}")],
                workdir / f"worker-{i}.log"))
        _wait_for(master_log, master, lambda text: text.count(WORKER_REGISTERED) >= workers,
                  f"{workers} Spark workers", deadline)
    except BaseException:
        cluster.stop()
        raise
    cluster.started_s = round(time.monotonic() - started, 3)
    return cluster


__all__ = ["StandaloneCluster", "cluster_env", "spark_home", "start_cluster"]
