"""The web console's files (HTML, a little JavaScript, CSS, the chart library) as the server
answers them: `/` is the groups page, `/console/<file>` any other file of server/console/.

Every file is read once when the server starts and looked up by name, so a request path never
reaches the file system (no directory traversal: a name that is not one of the files is a 404).
The pages hold no data: they fetch the `/v1` routes with the user's token, so they are served
without one. Own files are revalidated on every load (an ETag answers 304 when unchanged); the
vendored chart library is cached for a day.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

CONSOLE_DIR = Path(__file__).resolve().with_name("console")
PREFIX = "/console/"
INDEX = "index.html"
#: Content types by suffix; a file with another suffix is not served.
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".md": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
}
#: Pages load scripts and styles of their own origin only; images may be data: URLs (canvas).
POLICY = ("default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
          "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


@dataclass(frozen=True, slots=True)
class ConsoleFile:
    """One file's bytes and the headers it is answered with."""

    body: bytes
    headers: tuple[tuple[str, str], ...]
    etag: str


def content_type(name: str) -> str | None:
    """The content type of a console file by its suffix (LICENSE files are text)."""
    if Path(name).name.startswith("LICENSE"):
        return "text/plain; charset=utf-8"
    return CONTENT_TYPES.get(Path(name).suffix)


class ConsoleFiles:
    """The files under `root`, by their path relative to it (`vendor/uPlot.min.css`)."""

    def __init__(self, root: Path = CONSOLE_DIR) -> None:
        self.files: dict[str, ConsoleFile] = {}
        for path in sorted(root.rglob("*")):
            name = path.relative_to(root).as_posix()
            kind = content_type(name)
            if not path.is_file() or kind is None:
                continue
            body = path.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            cache = "public, max-age=86400" if name.startswith("vendor/") else "no-cache"
            headers = [("content-type", kind), ("etag", etag), ("cache-control", cache),
                       ("x-content-type-options", "nosniff"), ("referrer-policy", "no-referrer")]
            if name.endswith(".html"):
                headers.append(("content-security-policy", POLICY))
            self.files[name] = ConsoleFile(body, tuple(headers), etag)

    @staticmethod
    def serves(path: str) -> bool:
        """Whether a GET of `path` is the console's (the index or a file under /console/)."""
        return path == "/" or path.startswith(PREFIX)

    def find(self, path: str) -> ConsoleFile | None:
        """The file a request path names, or None."""
        return self.files.get(INDEX if path == "/" else path[len(PREFIX):])
