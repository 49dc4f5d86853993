"""A group's page in Chromium: its queues, a lag chart drawn with data points, the history
and its filters and paging, and the state at a past time beside now."""

from __future__ import annotations

from tests.console.conftest import LAG_BLUE, Shots, count_pixels, open_page
from tests.server.conftest import Server


def test_the_lag_chart_is_drawn_with_data_points(demo_server: Server, page: object,
                                                 shots: Shots) -> None:
    open_page(page, demo_server.url + "/console/group.html?group=analytics")
    rows = page.locator("#queues tbody tr")  # type: ignore[attr-defined]
    assert rows.count() == 4
    assert "WARN" in rows.nth(0).inner_text()
    chart = page.locator("#chart")  # type: ignore[attr-defined]
    points = int(chart.get_attribute("data-points"))
    assert points > 50  # three hours at 72 s steps, from the group's first commit on
    assert count_pixels(page, '#chart canvas', LAG_BLUE) > 200
    shots.take(page, "console-group", full_page=True)


def test_a_history_filter_narrows_the_rows(demo_server: Server, page: object) -> None:
    open_page(page, demo_server.url + "/console/group.html?group=shipping")
    table = page.locator("#history-rows tbody tr")  # type: ignore[attr-defined]
    assert table.count() == 50  # a full first page
    kinds = {table.nth(i).get_attribute("data-kind") for i in range(table.count())}
    assert kinds == {"commit", "pull"}
    page.select_option("#history-kind", "commit")  # type: ignore[attr-defined]
    page.fill("#history-queue", "2")  # type: ignore[attr-defined]
    page.click("#history-apply")  # type: ignore[attr-defined]
    page.wait_for_selector("#history-rows tbody tr[data-kind=pull]",  # type: ignore[attr-defined]
                           state="detached")
    cells = page.locator("#history-rows tbody tr td:nth-child(5)")  # type: ignore[attr-defined]
    assert {cells.nth(i).inner_text() for i in range(cells.count())} == {"2"}
    first_page = [int(s) for s in page.locator(  # type: ignore[attr-defined]
        "#history-rows tbody tr").evaluate_all("rows => rows.map(r => r.dataset.seq)")]
    assert len(first_page) == 50 and first_page == sorted(first_page, reverse=True)
    page.click("#history-older")  # type: ignore[attr-defined]
    page.wait_for_selector("#history-info:text-matches('^page 2')")  # type: ignore[attr-defined]
    second = [int(s) for s in page.locator(  # type: ignore[attr-defined]
        "#history-rows tbody tr").evaluate_all("rows => rows.map(r => r.dataset.seq)")]
    # shipping committed queue 2 sixty times: the rest of them, older than the first page
    assert len(second) == 10 and max(second) < min(first_page)


def test_state_at_shows_every_queue_then_beside_now(demo_server: Server, page: object) -> None:
    open_page(page, demo_server.url + "/console/group.html?group=billing")
    page.click("#state-show")  # type: ignore[attr-defined]  # default: an hour ago
    page.wait_for_selector("#state-rows tbody tr")  # type: ignore[attr-defined]
    rows = page.locator("#state-rows tbody tr")  # type: ignore[attr-defined]
    assert rows.count() == 4
    for i in range(4):
        assert rows.nth(i).get_attribute("class") == "changed"  # billing consumed since
        assert " → 2,500" in rows.nth(i).locator("td").nth(2).inner_text()
