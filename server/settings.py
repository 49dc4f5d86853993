"""The server's settings: one object, every limit in it (TigerBeetle's "put a limit on
everything"), passed from `offset-ledger serve` to granian's worker process as JSON in an
environment variable (the worker imports the app by name)."""

from __future__ import annotations

import functools
import os

import msgspec

from ledger.errors import InvalidInput

ENV = "OFFSET_LEDGER_SERVE"


class ServeSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    data_dir: str
    host: str = "127.0.0.1"
    port: int = 9888
    tokens: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    max_body_bytes: int = 16 * 1024 * 1024
    max_commands_per_request: int = 100_000
    #: Commands one group-commit batch takes at most, and that may wait at once (then 503).
    batch_commands_max: int = 65_536
    pending_commands_max: int = 1_000_000
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    shutdown_timeout_s: float = 30.0
    #: A SQL query runs at most this long (then 400); it is interrupted sooner when its
    #: client leaves or the server stops.
    sql_timeout_s: float = 10.0
    #: `serve --json`: once listening, print {"url": ...} on stdout (besides the stderr line).
    announce_json: bool = False
    #: granian's main process: the worker stops when it is gone (set by `server.serve`).
    parent_pid: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_commands_per_request", "batch_commands_max",
                     "pending_commands_max"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise InvalidInput(f"invalid {name.replace('_', '-')} {v!r}: must be a positive "
                                   "integer")
        for name in ("header_timeout_s", "body_timeout_s", "shutdown_timeout_s",
                     "sql_timeout_s"):
            if not getattr(self, name) > 0:
                raise InvalidInput(f"invalid {name.replace('_', '-')} {getattr(self, name)!r}: "
                                   "must be more than 0")
        if not 0 <= self.port <= 65535:
            raise InvalidInput(f"invalid port {self.port}: use 0 to 65535")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise InvalidInput("TLS needs both --tls-cert and --tls-key")
        if self.tokens is None and not is_loopback(self.host):
            raise InvalidInput(f"refusing to serve on {self.host} without --tokens: without "
                               "tokens anyone who reaches the port may reset offsets; bind "
                               "127.0.0.1 or give --tokens FILE")

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"

    @property
    def url(self) -> str:
        """Where it serves: an IPv6 address in brackets (RFC 3986), `http://[::1]:9888`."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def to_env(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_env(cls) -> ServeSettings:
        raw = os.environ.get(ENV)
        if not raw:
            raise InvalidInput(f"${ENV} is not set: start the server with `offset-ledger serve`")
        return msgspec.json.decode(raw, type=cls)


def resolve_host(host: str) -> str:
    """The address to listen on: an IP address as given, a name (`localhost`) resolved to its
    first address (IPv4 first); InvalidInput naming a name that does not resolve."""
    import ipaddress
    import socket

    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        reason = e.strerror if isinstance(e, socket.gaierror) else str(e)
        raise InvalidInput(f"invalid --host {host!r}: it does not resolve ({reason})") from None
    found.sort(key=lambda f: f[0] != socket.AF_INET)
    return str(found[0][4][0])


@functools.lru_cache(maxsize=256)
def is_loopback(host: str) -> bool:
    """`host` (a name or an address) is loopback: cached, as every request's Host asks it."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
