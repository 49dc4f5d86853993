"""Cross-site requests (DESIGN.md, Security rules): what a web page in the user's browser could
make the server do.

A browser sends a "simple" POST to any address without asking first (CORS preflights only
other methods and content types): `text/plain`, a form, or a body with no type at all. So
bodies are taken only as `application/json` or `application/x-ndjson` (415 otherwise), which
a page can send cross-site only after a preflight this server never answers. Without tokens
(loopback only) nothing else stands between a page and a reset, so there a request whose
`Origin` is not the server's own is refused (403), and so is a `Host` that is not a loopback
address (421): a page on a name the attacker re-points at 127.0.0.1 (DNS rebinding) is
same-origin to itself, but its requests name the attacker's host. With tokens a page has no
token to send, so neither check is needed.
"""

from __future__ import annotations

from collections.abc import Mapping

from server.routes import HttpError
from server.settings import ServeSettings, is_loopback

#: The media types a request body may be (parameters such as charset aside).
BODY_TYPES = ("application/json", "application/x-ndjson")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Guard:
    """The checks of one server: its scheme and port, whether tokens are checked."""

    def __init__(self, settings: ServeSettings, *, tokens_on: bool) -> None:
        self.scheme = settings.scheme
        self.port = settings.port
        self.same_site_only = not tokens_on

    def check_site(self, headers: Mapping[str, str]) -> None:
        """Without tokens: 421 for a Host that is not this loopback server, 403 for a foreign
        Origin. A request without them (curl, the Python client) passes."""
        if not self.same_site_only:
            return
        host = headers.get("host")
        if host is not None and not self._own(host, None):
            raise HttpError(421, "this server answers for its loopback address only, not for "
                                 f"Host {host!r} (a DNS rebinding?)")
        origin = headers.get("origin")
        if origin is not None:
            scheme, sep, authority = origin.partition("://")
            if not sep or scheme.lower() != self.scheme or "/" in authority or not self._own(
                    authority, _DEFAULT_PORTS.get(scheme.lower(), -1)):
                raise HttpError(403, f"forbidden: a request from origin {origin!r}: without "
                                     "--tokens this server answers only its own pages "
                                     f"({self.scheme}://127.0.0.1:{self.port})")

    def check_content_type(self, method: str, value: str | None) -> None:
        """415 unless a POST or PUT declares a JSON (or NDJSON) body."""
        if method not in ("POST", "PUT"):
            return
        media = (value or "").split(";", 1)[0].strip().lower()
        if media not in BODY_TYPES:
            shown = "none" if value is None else repr(value)
            raise HttpError(415, f"unsupported Content-Type {shown}: send the body as "
                                 "application/json (or application/x-ndjson to /v1/commands)",
                            (("accept-post", ", ".join(BODY_TYPES)),))

    def _own(self, authority: str, default_port: int | None) -> bool:
        """`authority` (host[:port]) names this server: a loopback host, on its port unless
        `default_port` is None (a Host: the name is what DNS rebinding changes)."""
        authority = authority.strip()
        if authority.startswith("["):
            host, _, rest = authority[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else (None if not rest else "x")
        else:
            host, colon, port_text_raw = authority.rpartition(":")
            if not colon:
                host, port_text_raw = authority, None  # type: ignore[assignment]
            port_text = port_text_raw
        if port_text is None:
            port = default_port
        elif port_text.isascii() and port_text.isdigit():
            port = int(port_text)
        else:
            return False
        return (default_port is None or port == self.port) and is_loopback(host.lower())

