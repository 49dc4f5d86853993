"""What the server adds for the console: its files (types, caching, no way out of the folder)
and the API routes the pages need (`/v1/lag`, `/v1/groups/{g}/lag/series`, `/v1/whoami`)."""

from __future__ import annotations

import time

import msgspec
import pytest
import urllib3

from server.console import CONSOLE_DIR, ConsoleFiles
from tests.console.conftest import demo_story, started
from tests.server.conftest import Server


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory):
    s = started(Server(tmp_path_factory.mktemp("console-routes") / "data"))
    try:
        with s.client() as c:
            c.commands(demo_story(int(time.time() * 1000)))
        yield s
    finally:
        s.kill()


def get(server: Server, path: str, **headers: str) -> urllib3.BaseHTTPResponse:
    return urllib3.request("GET", server.url + path, headers=headers, redirect=False)


def test_the_index_and_files_come_with_their_types_and_cache_headers(filled: Server) -> None:
    index = get(filled, "/")
    assert index.status == 200 and index.headers["content-type"] == "text/html; charset=utf-8"
    assert b"Consumer groups" in index.data
    assert "script-src" not in index.headers["content-security-policy"]  # default-src 'self'
    assert index.headers["cache-control"] == "no-cache"
    js = get(filled, "/console/charts.js")
    assert js.headers["content-type"] == "text/javascript; charset=utf-8"
    vendor = get(filled, "/console/vendor/uPlot.iife.min.js")
    assert vendor.status == 200 and vendor.headers["cache-control"] == "public, max-age=86400"
    assert vendor.data.startswith(b"/*! https://github.com/leeoniya/uPlot (v1.6.32) */")
    again = get(filled, "/console/charts.js", **{"If-None-Match": js.headers["etag"]})
    assert again.status == 304 and again.data == b""


@pytest.mark.parametrize("path", ["/console/nope.js", "/console/../app.py", "/console/%2e%2e/app.py",
                                  "/console/vendor/../../routes.py", "/console/", "/console"])
def test_anything_else_under_console_is_a_404(filled: Server, path: str) -> None:
    r = get(filled, path)
    assert r.status == 404, path


def test_only_the_console_folder_is_served(tmp_path) -> None:
    (tmp_path / "page.html").write_text("<p>x</p>")
    (tmp_path / "notes.sh").write_text("echo no")
    files = ConsoleFiles(tmp_path)
    assert set(files.files) == {"page.html"}  # a suffix without a content type is never served
    assert ConsoleFiles().find("/") is not None and (CONSOLE_DIR / "index.html").exists()


def test_lag_summarises_every_group_with_its_lag_at_its_last_commits(filled: Server) -> None:
    doc = msgspec.json.decode(get(filled, "/v1/lag").data)
    by = {g["consumer_group"]: g for g in doc}
    assert {g: by[g]["status"] for g in by} == {"analytics": "WARN", "billing": "OK",
                                               "shipping": "ERR"}
    shipping = by["shipping"]
    assert shipping["statuses"] == {"STOP": 4} and shipping["total_lag"] == 4000
    assert "window" not in shipping["max_lag"] and shipping["queues"] == 4
    # shipping's last 10 commits were each a minute behind: 25 messages on each of 4 queues
    assert [lag for _, lag in shipping["commit_lag"]] == [100] * len(shipping["commit_lag"])
    analytics = [lag for _, lag in by["analytics"]["commit_lag"]]
    assert analytics == sorted(analytics) and analytics[-1] > analytics[0]  # falling behind


def test_the_lag_series_of_a_group_and_its_errors(filled: Server) -> None:
    now = int(time.time() * 1000)
    r = get(filled, f"/v1/groups/billing/lag/series?since={now - 3_600_000}&until={now}"
                    "&every=PT10M")
    doc = msgspec.json.decode(r.data)
    assert r.status == 200 and len(doc) == 4 and len(doc[0]["series"]) == 7
    missing = get(filled, "/v1/groups/billing/lag/series?since=0&until=now")
    assert missing.status == 400 and b"every" in missing.data


def test_whoami_without_tokens_is_loopback_with_every_role_but_backfill(filled: Server) -> None:
    assert msgspec.json.decode(get(filled, "/v1/whoami").data) == {
        "name": "loopback", "roles": ["consume", "produce", "operate", "audit", "sync"],
        "groups": ["*"], "tokens": False}
