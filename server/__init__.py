"""offset-ledger's network face: HTTP API v1, group commit, tokens, metrics (DESIGN.md, "Server").

`serve(settings)` runs granian with the RSGI app of server/app.py in one worker process (the
ledger has one writer per data directory); it returns when the server stops (SIGTERM/SIGINT).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from server.settings import ENV, ServeSettings


def free_port(host: str) -> int:
    """A port the OS gives for `host` now (granian reports port 0 as 0, so the CLI picks it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def serve(settings: ServeSettings) -> int:
    """Run the server until SIGTERM/SIGINT; the exit code (0 after a clean stop)."""
    import msgspec
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.http import HTTP1Settings

    from server.process import forward_hangup

    if settings.port == 0:
        settings = msgspec.structs.replace(settings, port=free_port(settings.host))
    settings = msgspec.structs.replace(settings, parent_pid=os.getpid())
    os.environ[ENV] = settings.to_env()
    server = Granian(
        "server.app:app", interface=Interfaces.RSGI, address=settings.host, port=settings.port,
        workers=1, runtime_threads=1, loop=Loops.uvloop, http=HTTPModes.http1,
        http1_settings=HTTP1Settings(header_read_timeout=int(settings.header_timeout_s * 1000),
                                     max_buffer_size=65_536),
        backlog=1024, backpressure=1024,
        workers_kill_timeout=int(settings.shutdown_timeout_s),
        ssl_cert=Path(settings.tls_cert) if settings.tls_cert else None,
        ssl_key=Path(settings.tls_key) if settings.tls_key else None,
        log_access=False, log_level="warning")  # type: ignore[arg-type]
    forward_hangup(server)
    server.serve()
    return 0
