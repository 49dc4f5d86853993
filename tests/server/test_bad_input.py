"""Bad input against a real serve process: every one a 4xx with `{"error": "<one line naming
the bad value>"}`, and nothing appended (the log's next_seq, read by a reader of the data
directory, is the same before and after)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.limits import OFFSET_MAX
from tests.server.conftest import Server, raw

MAX_BODY = 4096
MAX_COMMANDS = 10
KEY = {"group": "g", "topic": "t", "queue_id": 0}
SLOW_S = 2  # --body-timeout and --header-timeout of the limited server


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("limited") / "data", "--max-body-bytes", str(MAX_BODY),
               "--max-commands", str(MAX_COMMANDS), "--body-timeout", str(SLOW_S),
               "--header-timeout", str(SLOW_S))
    try:
        status, _ = raw(s, "POST", "/v1/queues/append", b'{"topic":"t","queue":0,"count":100}')
        assert status == 200
        yield s
    finally:
        s.kill()


def _body(doc: object) -> bytes:
    return json.dumps(doc).encode()


BAD = [  # method, path, body, status, a part of the error naming the bad value
    ("POST", "/v1/commit", b'{"group":"g",', 400, "invalid JSON"),
    ("POST", "/v1/commit", b"", 400, "invalid JSON"),
    ("POST", "/v1/commit", b"\xff\xfe not utf-8", 400, "invalid JSON"),
    ("POST", "/v1/commit", b"[1, 2]", 400, "expected an object"),
    ("POST", "/v1/commit", b"[" * 10_000 + b"]" * 10_000, 413, "at most 4096"),
    ("POST", "/v1/commit", b"[" * 2000 + b"]" * 2000, 400, ""),
    ("POST", "/v1/commit", _body({**KEY, "offset": "ten"}), 400, "invalid offset 'ten'"),
    ("POST", "/v1/commit", _body({**KEY, "offset": 1.5}), 400, "invalid offset 1.5"),
    ("POST", "/v1/commit", _body({**KEY, "offset": True}), 400, "invalid offset true"),
    ("POST", "/v1/commit", _body({**KEY, "offset": -1}), 400, "invalid offset -1"),
    ("POST", "/v1/commit", _body({**KEY, "offset": OFFSET_MAX + 1}), 400,
     f"invalid offset {OFFSET_MAX + 1}"),
    ("POST", "/v1/commit", _body({**KEY, "queue_id": 2**31, "offset": 1}), 400,
     f"invalid queue id {2**31}"),
    ("POST", "/v1/commit", _body({**KEY, "offset": 1, "generation": -2}), 400,
     "invalid generation -2"),
    ("POST", "/v1/commit", _body({**KEY, "group": "bad name!", "offset": 1}), 400,
     "invalid group 'bad name!'"),
    ("POST", "/v1/commit", _body({**KEY, "topic": "x" * 250, "offset": 1}), 400,
     "invalid topic"),
    ("POST", "/v1/commit", _body({**KEY, "offset": 1, "client": ""}), 400, "invalid client ''"),
    ("POST", "/v1/commit", _body({**KEY, "offset": 1, "colour": "red"}), 400,
     "unknown field 'colour'"),
    ("POST", "/v1/commit", _body({**KEY, "offset": 1, "op": "reset"}), 400, "invalid op"),
    ("POST", "/v1/commit", _body({"group": "g", "topic": "t", "offset": 1}), 400,
     "commit needs queue_id"),
    ("POST", "/v1/pull", _body({**KEY, "client": "c", "max": -1}), 400, "invalid max -1"),
    ("POST", "/v1/queues/append", _body({"topic": "t", "queue": 0, "count": 0}), 400,
     "invalid count 0"),
    ("POST", "/v1/queues/append", _body({"topic": "t", "queue": 0, "queue_id": 0}), 400,
     "give queue or queue_id"),
    ("POST", "/v1/queues/truncate", _body({"topic": "t", "queue": 0, "min_offset": 101}), 400,
     "invalid min offset 101"),
    ("PUT", "/v1/groups/g", _body({"mode": "sideways"}), 400, "invalid mode 'sideways'"),
    ("PUT", "/v1/groups/g", _body({"initial": "soonest"}), 400, "invalid initial policy"),
    ("PUT", "/v1/groups/g", _body({"group": "h"}), 400, "the path says 'g'"),
    ("PUT", "/v1/groups/bad%20name", b"{}", 400, "invalid group 'bad name'"),
    ("DELETE", "/v1/groups/bad%20name", None, 400, "invalid group 'bad name'"),
    ("POST", "/v1/groups/g/reset", _body({"topic": "t"}), 400, "exactly one scenario"),
    ("POST", "/v1/groups/g/reset", _body({"topic": "t", "to_offset": 1, "to_latest": True}),
     400, "got to_offset, to_latest"),
    ("POST", "/v1/groups/g/reset", _body({"to_offset": 1, "execute": True}), 400,
     "reset needs a scope"),
    ("POST", "/v1/groups/g/reset", _body({"topic": "t", "to_datetime": "yesterday",
                                          "execute": True}), 400, "'yesterday'"),
    ("POST", "/v1/commands", b"", 400, "the body is empty"),
    ("POST", "/v1/commands", b"[1", 400, "invalid JSON"),
    ("POST", "/v1/commands", _body([{"op": "commit", **KEY, "offset": 1}] * (MAX_COMMANDS + 1)),
     413, f"{MAX_COMMANDS + 1} commands in one request: at most {MAX_COMMANDS}"),
    ("POST", "/v1/sql", _body({"query": "DELETE FROM offsets"}), 400, "read-only"),
    ("POST", "/v1/sql", _body({"sql": "SELECT 1"}), 400, "sql needs a JSON body"),
    ("GET", "/v1/history?queue_id=zero", None, 400, "invalid queue_id 'zero'"),
    ("GET", "/v1/history?limit=-1", None, 400, "invalid limit -1"),
    ("GET", f"/v1/history?limit={OFFSET_MAX + 1}", None, 400, f"invalid limit {OFFSET_MAX + 1}"),
    ("GET", "/v1/history?kind=teleport", None, 400, "invalid kind 'teleport'"),
    ("GET", "/v1/history?since=1700000000", None, 400, "epoch seconds"),
    ("GET", "/v1/history?colour=red", None, 400, "unknown query parameter 'colour'"),
    ("GET", "/v1/state", None, 400, "state needs at"),
    ("GET", "/v1/lookup?topic=t", None, 400, "lookup needs topic and datetime"),
    ("GET", "/v1/groups/g/lag?window=0", None, 400, "invalid window 0"),
    ("GET", "/v2/commit", None, 404, "no route GET /v2/commit"),
    ("GET", "/v1/commit", None, 405, "GET is not allowed on /v1/commit: use POST"),
    ("DELETE", "/metrics", None, 405, "use GET"),
    ("PATCH", "/v1/groups/g", b"{}", 405, "use DELETE, PUT"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "names"), BAD,
                         ids=[f"{m} {p[:40]} {i}" for i, (m, p, *_) in enumerate(BAD)])
def test_bad_input_is_a_4xx_naming_the_value_and_appends_nothing(
        limited: Server, method: str, path: str, body: bytes | None, status: int,
        names: str) -> None:
    before = limited.next_seq()
    got, doc = raw(limited, method, path, body,
                   {"Content-Type": "application/json"} if body is not None else None)
    assert got == status, doc
    _assert_one_line_error(doc, names)
    assert limited.next_seq() == before


def _assert_one_line_error(doc: object, names: str) -> None:
    assert isinstance(doc, dict) and set(doc) == {"error"}, doc
    assert isinstance(doc["error"], str) and doc["error"], doc
    assert "\n" not in doc["error"] and len(doc["error"]) < 500, doc
    assert names in doc["error"], doc


def _exchange(server: Server, head: bytes, body_parts: list[bytes] = ()) -> tuple[int, object]:
    """Send `head` (and body parts, as far as the server reads them) on a raw socket; the
    status and JSON body of the answer."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(head)
        try:
            for part in body_parts:
                s.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before taking the rest
        data = b""
        while b"\r\n\r\n" not in data or len(data) < _length(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head_text, _, payload = data.partition(b"\r\n\r\n")
    return int(head_text.split()[1]), json.loads(payload[:_length(data)])


def _length(data: bytes) -> int:
    head, sep, _ = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(head) + len(sep) + int(value)
    return 1 << 30


def test_a_declared_length_over_the_limit_is_413_before_the_body_is_read(limited: Server) -> None:
    """Only the headers are sent: an answer proves the server did not wait for the body (it
    would have waited --body-timeout, 30 s, then said 408)."""
    before = limited.next_seq()
    head = (b"POST /v1/commit HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000000\r\n\r\n")
    status, doc = _exchange(limited, head)
    assert status == 413
    _assert_one_line_error(doc, "the body is 1000000000 bytes: at most 4096")
    assert limited.next_seq() == before


def test_a_chunked_body_over_the_limit_is_413(limited: Server) -> None:
    before = limited.next_seq()
    head = (b"POST /v1/commands HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    line = json.dumps({"op": "commit", **KEY, "offset": 1}).encode() + b"\n"
    chunk = line * (MAX_BODY // len(line) // 2 + 1)  # two chunks pass the limit
    parts = [b"%x\r\n%s\r\n" % (len(chunk), chunk)] * 4 + [b"0\r\n\r\n"]
    status, doc = _exchange(limited, head, parts)
    assert status == 413
    _assert_one_line_error(doc, f"the body passed {MAX_BODY} bytes")
    assert limited.next_seq() == before


def test_a_chunked_body_under_the_limit_is_applied(limited: Server) -> None:
    """The control: the same framing under the limit is read and applied."""
    before = limited.next_seq()
    head = (b"POST /v1/commands HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-ndjson\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    line = json.dumps({"op": "commit", "group": "chunked", "topic": "t", "queue_id": 0,
                       "offset": 3}).encode() + b"\n"
    status, doc = _exchange(limited, head, [b"%x\r\n%s\r\n" % (len(line), line), b"0\r\n\r\n"])
    assert status == 200, doc
    assert isinstance(doc, list) and doc[0]["op"] == "commit" and "error" not in doc[0], doc
    assert limited.next_seq() == before + 1


def test_a_slow_body_is_408_and_holds_no_one_else(limited: Server) -> None:
    before = limited.next_seq()
    with socket.create_connection(("127.0.0.1", limited.port), timeout=60) as slow:
        slow.sendall(b"POST /v1/commit HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 100\r\n\r\n{\"group\":")
        started = time.monotonic()
        status, doc = raw(limited, "POST", "/v1/commit", _body({**KEY, "offset": 7}))
        assert status == 200 and time.monotonic() - started < SLOW_S, doc  # not held
        answer = slow.recv(65536)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"did not arrive within 2 s" in answer
    assert limited.next_seq() == before + 1  # the other's commit only


def test_slow_headers_are_cut_off_and_hold_no_one_else(limited: Server) -> None:
    with socket.create_connection(("127.0.0.1", limited.port), timeout=60) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and no end of headers
        started = time.monotonic()
        assert raw(limited, "GET", "/healthz")[0] == 200
        assert time.monotonic() - started < SLOW_S
        try:
            rest = slow.recv(65536)
        except ConnectionResetError:
            rest = b""
        waited = time.monotonic() - started
    assert rest == b"" or rest.startswith(b"HTTP/1.1 408"), rest  # closed, or told why
    assert waited < SLOW_S + 10, waited


def test_a_bad_line_among_commands_is_answered_in_place_and_the_others_apply(
        limited: Server) -> None:
    before = limited.next_seq()
    body = _body([{"op": "commit", "group": "mixed", "topic": "t", "queue_id": 0, "offset": 5},
                  {"op": "commit", "group": "mixed", "topic": "t", "queue_id": 0, "offset": -5},
                  {"op": "teleport"}])
    status, doc = raw(limited, "POST", "/v1/commands", body)
    assert status == 200
    assert [("error" in r) for r in doc] == [False, True, True], doc
    assert "invalid offset -5" in doc[1]["error"] and "unknown op 'teleport'" in doc[2]["error"]
    assert limited.next_seq() == before + 1


def test_an_append_past_the_largest_offset_is_a_400_and_the_server_goes_on(
        limited: Server) -> None:
    """Found by schemathesis: it used to break the writer and fail the whole batch (500)."""
    status, _ = raw(limited, "POST", "/v1/commands", _body([
        {"op": "queue_bounds", "topic": "huge", "queue_id": 0, "max_offset": OFFSET_MAX}]))
    assert status == 200
    before = limited.next_seq()
    status, doc = raw(limited, "POST", "/v1/queues/append",
                      _body({"topic": "huge", "queue": 0, "count": 1}))
    assert status == 400
    _assert_one_line_error(doc, "would pass the largest offset")
    assert limited.next_seq() == before
    status, doc = raw(limited, "POST", "/v1/queues/append",
                      _body({"topic": "t", "queue": 1, "count": 1}))
    assert status == 200, doc


def test_the_limited_server_stops_cleanly(limited: Server, tmp_path: Path) -> None:
    assert limited.stop() == 0
    assert "Traceback" not in limited.stderr, limited.stderr
