"""The groups page in Chromium: every demo group with the status lag health gives it,
unhealthy first, a sparkline each, and the name filter."""

from __future__ import annotations

from tests.console.conftest import Shots, open_page
from tests.server.conftest import Server


def test_groups_page_lists_the_demo_groups_unhealthy_first(demo_server: Server, page: object,
                                                           shots: Shots) -> None:
    open_page(page, demo_server.url + "/")
    rows = page.locator("#groups tbody tr")  # type: ignore[attr-defined]
    assert rows.count() == 3
    seen = [(rows.nth(i).get_attribute("data-group"), rows.nth(i).get_attribute("data-status"))
            for i in range(3)]
    # shipping stopped committing an hour in with work waiting (STOP), analytics falls behind
    # (WARN), billing keeps up (OK)
    assert seen == [("shipping", "ERR"), ("analytics", "WARN"), ("billing", "OK")]
    shipping = rows.nth(0).inner_text()
    assert "4,000" in shipping  # total lag: 40 minutes of 25 messages on 4 queues
    page.wait_for_selector("#groups tr[data-group='analytics'] .spark canvas")  # type: ignore[attr-defined]
    points = page.get_attribute("#groups tr[data-group='analytics'] .spark",  # type: ignore[attr-defined]
                                "data-points")
    assert int(points) > 5
    shots.take(page, "console-groups")


def test_the_filter_keeps_the_groups_whose_name_matches(demo_server: Server, page: object) -> None:
    open_page(page, demo_server.url + "/")
    page.fill("#filter", "ship")  # type: ignore[attr-defined]
    visible = page.locator("#groups tbody tr:visible")  # type: ignore[attr-defined]
    assert [visible.nth(i).get_attribute("data-group") for i in range(visible.count())] == [
        "shipping"]
    assert page.inner_text("#count") == "1 of 3 groups"  # type: ignore[attr-defined]
    page.fill("#filter", "")  # type: ignore[attr-defined]
    assert page.locator("#groups tbody tr:visible").count() == 3  # type: ignore[attr-defined]
