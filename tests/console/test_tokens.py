"""The console under tokens: a login field, then only what the token's roles allow: a consumer
token reads its group but never sees the reset form; an operator resets; an auditor runs SQL
and downloads the rows as CSV."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.tokens import add_token
from tests.console.conftest import DEMO_GROUP, Shots, demo_story, started
from tests.server.conftest import Server


@pytest.fixture(scope="module")
def tokens_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict]]:
    root = tmp_path_factory.mktemp("console-tokens")
    path = root / "tokens.toml"
    tokens = {"ops": add_token(path, "ops", ["operate", "audit"], []),
              "billing-app": add_token(path, "billing-app", ["consume"], ["billing*"]),
              "loader": add_token(path, "loader", ["produce", "consume", "operate"], [])}
    s = started(Server(root / "data", "--tokens", str(path)))
    try:
        with s.client(tokens["loader"]) as c:
            story = demo_story(int(time.time() * 1000))
            assert not [r for r in c.commands(story) if "error" in r]
        yield s, tokens
    finally:
        s.kill()


def sign_in(page: object, url: str, token: str) -> None:
    page.goto(url)  # type: ignore[attr-defined]
    page.wait_for_selector("#login")  # type: ignore[attr-defined]
    page.fill("#token", token)  # type: ignore[attr-defined]
    page.click("#login button")  # type: ignore[attr-defined]
    page.wait_for_selector("body[data-ready='1']")  # type: ignore[attr-defined]


def test_a_wrong_token_is_refused_at_the_login_field(tokens_server: tuple[Server, dict],
                                                     page: object, shots: Shots) -> None:
    server, _ = tokens_server
    page.goto(server.url + "/")  # type: ignore[attr-defined]
    page.fill("#token", "not-a-token")  # type: ignore[attr-defined]
    page.click("#login button")  # type: ignore[attr-defined]
    page.wait_for_selector("#login-error:text-is('unknown token')")  # type: ignore[attr-defined]
    shots.take(page, "console-login")


def test_a_consumer_token_reads_its_group_but_cannot_see_the_reset_form(
        tokens_server: tuple[Server, dict], page: object, shots: Shots) -> None:
    server, tokens = tokens_server
    sign_in(page, server.url + f"/console/group.html?group={DEMO_GROUP}", tokens["billing-app"])
    assert page.locator("#queues tbody tr").count() == 4  # type: ignore[attr-defined]
    assert int(page.get_attribute("#chart", "data-points")) > 50  # type: ignore[attr-defined]
    assert page.locator("#reset-form").count() == 0  # type: ignore[attr-defined]
    assert not page.is_visible("#reset-section")  # type: ignore[attr-defined]
    assert "needs the audit role" in page.inner_text("#history")  # type: ignore[attr-defined]
    assert page.locator("#bar a", has_text="SQL").count() == 0  # type: ignore[attr-defined]
    assert page.inner_text("#bar .who") == "billing-app (consume)"  # type: ignore[attr-defined]
    shots.take(page, "console-consumer")


def test_an_operator_sees_the_reset_form(tokens_server: tuple[Server, dict], page: object) -> None:
    server, tokens = tokens_server
    sign_in(page, server.url + f"/console/group.html?group={DEMO_GROUP}", tokens["ops"])
    assert page.is_visible("#reset-form")  # type: ignore[attr-defined]
    assert page.locator("#history-rows tbody tr").count() == 50  # type: ignore[attr-defined]


def test_an_auditor_runs_sql_and_downloads_the_rows_as_csv(tokens_server: tuple[Server, dict],
                                                           page: object, tmp_path: Path) -> None:
    server, tokens = tokens_server
    sign_in(page, server.url + "/console/sql.html", tokens["ops"])
    page.fill("#sql-query", "SELECT queue_id, committed_offset FROM progress "  # type: ignore[attr-defined]
                            f"WHERE consumer_group = '{DEMO_GROUP}' ORDER BY queue_id")
    page.click("#sql-run")  # type: ignore[attr-defined]
    page.wait_for_selector("#sql-rows tbody tr")  # type: ignore[attr-defined]
    assert page.locator("#sql-rows tbody tr").count() == 4  # type: ignore[attr-defined]
    with page.expect_download() as download:  # type: ignore[attr-defined]
        page.click("#sql-csv")  # type: ignore[attr-defined]
    saved = tmp_path / "rows.csv"
    download.value.save_as(saved)
    assert saved.read_bytes() == (b"queue_id,committed_offset\r\n0,2500\r\n1,2500\r\n2,2500\r\n"
                                  b"3,2500\r\n")
    page.fill("#sql-query", "DELETE FROM events")  # type: ignore[attr-defined]
    page.click("#sql-run")  # type: ignore[attr-defined]
    page.wait_for_selector("#sql-rows .error")  # type: ignore[attr-defined]
    assert page.inner_text("#sql-rows .error").startswith("400: ")  # type: ignore[attr-defined]
