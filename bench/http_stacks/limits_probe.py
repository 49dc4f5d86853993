"""`python -m bench.http_stacks.limits_probe`: what each stack does with hostile or ending traffic.

Why: the DESIGN asks for a body limit (413), header and idle timeouts, TLS and a SIGTERM that
finishes the batch in hand; documentation says what an option is called, this checks what
the running server does with it, over raw sockets:
- too_large: a 17 MB Content-Length with no body sent: is a 413 answered before the body?
- idle_close_s: after one answered request, how long an idle keep-alive connection is kept;
- silent_close_s: a connection that sends nothing at all;
- slow_headers_close_s: a client sending one header line a second (slowloris);
- sigterm: requests in flight (the committer pauses 1.5 s before its write) get their 200,
  the listener is closed, the process exits 0;
- tls: one request over HTTPS with a self-signed certificate and key file.
Each stack is started with its timeouts set to 3 s where it has such a setting.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from bench.http_stacks.measure import RunningServer, Target
from bench.http_stacks.run import STACKS

TIMEOUT_S = 3
WATCH_S = 15.0

LIMIT_OPTIONS: dict[str, list[str]] = {
    "uvicorn+starlette": ["--timeout-keep-alive", str(TIMEOUT_S), "--timeout-graceful-shutdown", "10"],
    "granian-asgi+starlette": ["--http1-header-read-timeout", str(TIMEOUT_S * 1000)],
    "granian-rsgi": ["--http1-header-read-timeout", str(TIMEOUT_S * 1000)],
    "aiohttp": ["--keepalive-timeout", str(TIMEOUT_S), "--shutdown-timeout", "10"],
}
TLS_OPTIONS: dict[str, list[str]] = {
    "uvicorn+starlette": ["--ssl-certfile", "{cert}", "--ssl-keyfile", "{key}"],
    "granian-asgi+starlette": ["--ssl-certificate", "{cert}", "--ssl-keyfile", "{key}"],
    "granian-rsgi": ["--ssl-certificate", "{cert}", "--ssl-keyfile", "{key}"],
    "aiohttp": ["--tls-cert", "{cert}", "--tls-key", "{key}"],
}


def with_options(target: Target, options: list[str]) -> Target:
    """The target with server options added before the app argument (granian wants them first)."""
    argv = list(target.argv)
    argv = argv[:-1] + options + argv[-1:] if "granian" in target.name else argv + options
    return Target(target.name, argv, target.env, target.commit_path)


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _closed_within(s: socket.socket, limit_s: float) -> float | None:
    """Seconds until the peer closes `s` (reading and dropping what it sends), None if it does not."""
    t0 = time.monotonic()
    s.settimeout(0.2)
    while time.monotonic() - t0 < limit_s:
        try:
            if s.recv(65536) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def _read_response(s: socket.socket, timeout_s: float = 5.0) -> bytes:
    s.settimeout(timeout_s)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (TimeoutError, OSError):
        pass
    return data


def probe_too_large(port: int) -> str:
    s = _connect(port)
    s.sendall(b"POST /v1/commit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 17000000\r\n\r\n{\"group\":")
    head = _read_response(s, 3.0)
    s.close()
    return head.split(b"\r\n", 1)[0].decode(errors="replace") or "no answer within 3 s"


def probe_idle(port: int) -> float | None:
    s = _connect(port)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    _read_response(s)
    closed = _closed_within(s, WATCH_S)
    s.close()
    return closed


def probe_silent(port: int) -> float | None:
    s = _connect(port)
    closed = _closed_within(s, WATCH_S)
    s.close()
    return closed


def probe_slow_headers(port: int) -> float | None:
    s = _connect(port)
    t0 = time.monotonic()
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        for i in range(int(WATCH_S)):
            if _closed_within(s, 1.0) is not None:
                return time.monotonic() - t0
            s.sendall(b"X-Slow-%d: y\r\n" % i)
    except OSError:
        return time.monotonic() - t0
    finally:
        s.close()
    return None


def probe_sigterm(server: RunningServer, n: int = 4) -> dict:
    """n commits in flight, then SIGTERM: their statuses, whether new connections are refused."""
    answers: list[str] = []

    def one(i: int) -> None:
        body = b'{"group":"g","topic":"t","queue_id":%d,"offset":1}' % i
        try:
            s = _connect(server.port)
            s.sendall(b"POST /v1/commit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            head = _read_response(s, 20.0)
            s.close()
            answers.append(head.split(b"\r\n", 1)[0].decode(errors="replace") or "closed, no answer")
        except OSError as exc:
            answers.append(f"error: {exc}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    t_sig = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    try:
        s = _connect(server.port)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        late = _read_response(s, 3.0).split(b"\r\n", 1)[0].decode(errors="replace") or "accepted, no answer"
        s.close()
    except OSError as exc:
        late = f"refused ({exc.__class__.__name__})"
    for t in threads:
        t.join(25)
    try:
        code = server.proc.wait(30)
    except subprocess.TimeoutExpired:
        code = None
    return {"in_flight": answers, "new_connection_after_sigterm": late, "exit_code": code,
            "exit_s": round(time.monotonic() - t_sig, 2)}


def probe_tls(target: Target, workdir: Path) -> str:
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    if not cert.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                        "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
                       check=True, capture_output=True)
    opts = [o.replace("{cert}", str(cert)).replace("{key}", str(key)) for o in TLS_OPTIONS[target.name]]
    tls_target = with_options(target, opts)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        server = RunningServer(tls_target, workdir / f"{target.name}-tls.out", health_scheme="https")
    except RuntimeError as exc:
        return f"did not start: {exc}"
    with server, socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        status = _read_response(s).split(b"\r\n", 1)[0].decode(errors="replace")  # type: ignore[arg-type]
        return f"{status} over {s.version()}"


def probe(target: Target, workdir: Path) -> dict:
    """Every check against one stack (a fresh server for the SIGTERM and TLS checks)."""
    limited = with_options(target, LIMIT_OPTIONS[target.name])
    out: dict = {"stack": target.name, "options": " ".join(LIMIT_OPTIONS[target.name])}
    with RunningServer(limited, workdir / f"{target.name}.out") as server:
        out["too_large"] = probe_too_large(server.port)
        results: dict[str, float | None] = {}
        checks = {"idle_close_s": probe_idle, "silent_close_s": probe_silent,
                  "slow_headers_close_s": probe_slow_headers}
        threads = [threading.Thread(target=lambda k=k, f=f: results.__setitem__(k, f(server.port)))
                   for k, f in checks.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out.update({k: None if v is None else round(v, 1) for k, v in results.items()})
    server = RunningServer(limited, workdir / f"{target.name}-term.out", {"HTTP_BENCH_DELAY_MS": "1500"})
    out["sigterm"] = probe_sigterm(server)
    server.stop()
    out["tls"] = probe_tls(target, workdir)
    return out


def main(argv: list[str] | None = None) -> None:
    """Probe the stacks named (all by default) and print one JSON document per stack."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--stacks", default=",".join(STACKS))
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="limits-probe-"))
    for name in args.stacks.split(","):
        print(json.dumps(probe(STACKS[name], workdir)), flush=True)


if __name__ == "__main__":
    main()
