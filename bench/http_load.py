"""HTTP load for the server benchmarks: wrk at full speed, and a fixed-rate driver for latency.

Why two drivers: wrk (C, one connection per request slot) finds the most requests per second a
server gives at C connections, but it sends the next request only when the previous one is
answered, so its latency hides the queueing a slow server causes (coordinated omission), and
Debian has no wrk2. Latency at a fixed offered load comes from `run_fixed_rate`: requests are
due at fixed times, whatever the server does, and each one's latency counts from when it was
due, so a stall shows up in the tail instead of slowing the sender down.

Both post `POST /v1/commit` bodies whose keys vary: consecutive requests walk 10,000 keys per
sender (100 groups x 10 topics x 10 queues), so one key comes back only after 10,000 other
requests, long after its previous commit was answered; offsets start at the wall-clock second
times 10^6, so a later run against the same server only ever raises a key's offset (a reference
server with the increase-only rule refuses no commit of the workload with 409).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

KEYS_PER_SENDER = 10_000
_RESULT_TAG = "WRK_JSON "


class WrkMissing(RuntimeError):
    """wrk is not on PATH: the load benchmarks cannot run."""


@dataclass(frozen=True)
class LoadResult:
    """What one wrk run measured (latencies of the answered requests, in milliseconds)."""

    requests: int
    duration_s: float
    requests_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    non_2xx: int

    def as_dict(self) -> dict[str, float | int]:
        """The figures as a JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class FixedRateResult:
    """What one fixed-rate run measured; latency counts from each request's due time."""

    offered_per_s: float
    requests: int
    requests_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    errors: int
    non_2xx: int
    dispatch_lag_p99_ms: float
    """How late the driver itself sent (its timer and CPU), included in the latencies above."""

    def as_dict(self) -> dict[str, float | int]:
        """The figures as a JSON-ready dict."""
        return asdict(self)


def wrk_path() -> str:
    """The wrk binary, or WrkMissing saying how to install it."""
    path = shutil.which("wrk")
    if path is None:
        raise WrkMissing("wrk is not installed (needed by the HTTP load benchmarks): "
                         "apt-get install wrk")
    return path


def commit_script(path: str = "/v1/commit", keys: int = KEYS_PER_SENDER) -> str:
    """A wrk Lua script posting commit bodies over `keys` keys per wrk thread, printing JSON."""
    return f"""
local next_id = 0
function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
end

local counter = 0
local base = os.time() * 1000000
local headers = {{["Content-Type"] = "application/json"}}
function request()
  local k = counter % {keys}
  local off = base + math.floor(counter / {keys})
  counter = counter + 1
  local body = string.format(
    '{{"group":"g%d-%d","topic":"topic-%d","queue_id":%d,"offset":%d,"client":"wrk-%d"}}',
    tid, k % 100, math.floor(k / 100) % 10, math.floor(k / 1000), off, tid)
  return wrk.format("POST", "{path}", headers, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{_RESULT_TAG}{{"requests":%d,"duration_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,' ..
    '"max_us":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d,"status":%d}}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, e.connect, e.read, e.write, e.timeout, e.status))
end
"""


def parse_wrk_output(text: str) -> LoadResult:
    """The figures of the JSON line the script's done() printed; ValueError if there is none."""
    for line in text.splitlines():
        if line.startswith(_RESULT_TAG):
            raw = json.loads(line[len(_RESULT_TAG):])
            break
    else:
        raise ValueError(f"no {_RESULT_TAG.strip()} line in wrk's output:\n{text}")
    duration_s = raw["duration_us"] / 1e6
    return LoadResult(
        requests=raw["requests"],
        duration_s=duration_s,
        requests_per_s=raw["requests"] / duration_s if duration_s > 0 else 0.0,
        p50_ms=raw["p50_us"] / 1e3,
        p90_ms=raw["p90_us"] / 1e3,
        p99_ms=raw["p99_us"] / 1e3,
        max_ms=raw["max_us"] / 1e3,
        errors=raw["connect"] + raw["read"] + raw["write"] + raw["timeout"],
        non_2xx=raw["status"],
    )


def run_wrk(url: str, duration_s: float, connections: int, threads: int = 1,
            script: str | None = None, timeout_s: float = 10.0) -> LoadResult:
    """Run wrk against `url` (commit bodies unless `script` is given) and parse its figures.

    One wrk thread by default: on this 2-core machine the server needs the other core, and one
    wrk thread drives 64 connections at well over the rates measured here.
    """
    import os
    import tempfile

    exe = wrk_path()
    threads = max(1, min(threads, connections))
    text = script if script is not None else commit_script(urlsplit(url).path or "/")
    fd, lua = tempfile.mkstemp(prefix="wrk-", suffix=".lua")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        cmd = [exe, f"-t{threads}", f"-c{connections}", f"-d{max(1, round(duration_s))}s",
               f"--timeout={max(1, round(timeout_s))}s", "-s", lua, url]
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              timeout=duration_s + timeout_s + 30)
    finally:
        os.unlink(lua)
    if proc.returncode != 0:
        raise RuntimeError(f"wrk exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
    return parse_wrk_output(proc.stdout)


def commit_body(i: int, sender: int, base: int) -> bytes:
    """The i-th commit body of one sender (the same key walk as the wrk script)."""
    k = i % KEYS_PER_SENDER
    off = base + i // KEYS_PER_SENDER
    return (f'{{"group":"g{sender}-{k % 100}","topic":"topic-{k // 100 % 10}",'
            f'"queue_id":{k // 1000},"offset":{off},"client":"load-{sender}"}}').encode()


def _percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list (0.0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, round(pct / 100 * len(sorted_values) + 0.4999))
    return sorted_values[min(rank, len(sorted_values)) - 1]


class _Connection(asyncio.Protocol):
    """One keep-alive client connection: one request in flight, its answer read by httptools."""

    def __init__(self) -> None:
        import httptools

        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[int] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except Exception as exc:  # httptools.HttpParserError and kin
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("server closed the connection"))

    def on_message_complete(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(self._parser.get_status_code())
        self._waiter = None

    def _fail(self, exc: BaseException) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self._waiter = None

    def send(self, raw: bytes) -> asyncio.Future[int]:
        """Write one request; the future gives the answer's status code."""
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return self._waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def _fixed_rate(url: str, rate: float, duration_s: float, connections: int,
                      timeout_s: float) -> FixedRateResult:
    loop = asyncio.get_running_loop()
    # perf_counter, not loop.time(): uvloop's clock ticks in whole milliseconds. Timers still
    # fire on millisecond ticks, so a request may leave up to ~1 ms late: dispatch_lag says so.
    clock = time.perf_counter
    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/"
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Content-Type: application/json\r\nContent-Length: ").encode()

    async def connect() -> _Connection:
        _, proto = await loop.create_connection(_Connection, host, port)
        return proto

    idle: asyncio.Queue[_Connection] = asyncio.Queue()
    for _ in range(connections):
        idle.put_nowait(await connect())
    base = int(time.time()) * 1_000_000
    latencies: list[float] = []
    lags: list[float] = []
    counts = {"errors": 0, "non_2xx": 0}

    async def one(i: int, due: float) -> None:
        conn = await idle.get()
        body = commit_body(i, 0, base)
        try:
            status = await asyncio.wait_for(conn.send(head + b"%d\r\n\r\n" % len(body) + body), timeout_s)
        except Exception:  # a reset, a timeout, an unparsable answer: all count as errors
            counts["errors"] += 1
            conn.close()
            try:
                conn = await connect()
            except OSError:
                return  # the pool shrinks; later requests wait longer, which the tail shows
        else:
            latencies.append(clock() - due)
            if not 200 <= status < 300:
                counts["non_2xx"] += 1
        idle.put_nowait(conn)

    n = int(rate * duration_s)
    tasks: list[asyncio.Task[None]] = []
    start = clock() + 0.05
    for i in range(n):
        due = start + i / rate
        delay = due - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(max(0.0, clock() - due))
        tasks.append(loop.create_task(one(i, due)))
    _, pending = await asyncio.wait(tasks, timeout=timeout_s + 5) if tasks else (set(), set())
    for task in pending:
        task.cancel()
    elapsed = clock() - start
    while not idle.empty():
        idle.get_nowait().close()
    latencies.sort()
    lags.sort()
    ms = 1e3
    return FixedRateResult(
        offered_per_s=rate,
        requests=len(latencies),
        requests_per_s=len(latencies) / elapsed if elapsed > 0 else 0.0,
        p50_ms=_percentile(latencies, 50) * ms,
        p90_ms=_percentile(latencies, 90) * ms,
        p99_ms=_percentile(latencies, 99) * ms,
        p999_ms=_percentile(latencies, 99.9) * ms,
        max_ms=(latencies[-1] if latencies else 0.0) * ms,
        errors=counts["errors"] + len(pending),
        non_2xx=counts["non_2xx"],
        dispatch_lag_p99_ms=_percentile(lags, 99) * ms,
    )


def run_fixed_rate(url: str, rate: float, duration_s: float, connections: int = 64,
                   timeout_s: float = 10.0) -> FixedRateResult:
    """Post commits at `rate` per second for `duration_s` over up to `connections` connections.

    Latency is from each request's due time to its answer, so waiting for a free connection
    (the server being slower than the offered rate) counts. Runs on uvloop when it is there, to
    keep the driver's own CPU share (it shares the machine with the server) small.
    """
    try:
        import uvloop

        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_fixed_rate(url, rate, duration_s, connections, timeout_s))
    finally:
        loop.close()
