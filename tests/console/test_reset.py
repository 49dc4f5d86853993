"""Resetting from the console: a dry run shows the plan with the messages replayed; executing
it changes the queues table and marks the reset on the lag chart; a plan whose queues moved
after it was shown is refused, and the page says so."""

from __future__ import annotations

from tests.console.conftest import DEMO_GROUP, DEMO_TOPIC, Shots, open_page
from tests.server.conftest import Server


def plan_shift_back(page: object, by: int) -> None:
    page.fill("#reset-topics", DEMO_TOPIC)  # type: ignore[attr-defined]
    page.select_option("#reset-scenario", "shift_by")  # type: ignore[attr-defined]
    page.fill("#reset-number", str(-by))  # type: ignore[attr-defined]
    page.click("#reset-plan")  # type: ignore[attr-defined]
    page.wait_for_selector("#reset-summary")  # type: ignore[attr-defined]


def committed(page: object, queue: str) -> str:
    return page.locator(f"#queues tr[data-queue='{queue}'] td").nth(3).inner_text()  # type: ignore[attr-defined]


def test_a_dry_run_shows_the_plan_and_executing_it_moves_the_offsets(demo_server: Server,
                                                                     page: object,
                                                                     shots: Shots) -> None:
    open_page(page, demo_server.url + f"/console/group.html?group={DEMO_GROUP}")
    assert committed(page, f"{DEMO_TOPIC}:0") == "2,500"
    assert page.get_attribute("#chart", "data-resets") == "0"  # type: ignore[attr-defined]
    plan_shift_back(page, 500)
    assert page.inner_text("#reset-summary") == (  # type: ignore[attr-defined]
        "4 queue(s): 2,000 message(s) to replay, 0 to skip")
    plan = page.locator("#reset-plan-out tbody tr")  # type: ignore[attr-defined]
    assert plan.count() == 4
    assert plan.nth(0).inner_text().split() == ["orders", "0", "2,500", "2,000", "500", "0"]
    assert committed(page, f"{DEMO_TOPIC}:0") == "2,500"  # a dry run changes nothing
    shots.take(page, "console-reset-plan", full_page=True)

    page.fill("#reset-reason", "INC-9 replay the last 500")  # type: ignore[attr-defined]
    page.click("#reset-execute")  # type: ignore[attr-defined]
    page.wait_for_selector("#reset-status.ok-msg")  # type: ignore[attr-defined]
    page.wait_for_selector("#chart[data-resets='1']")  # type: ignore[attr-defined]
    assert committed(page, f"{DEMO_TOPIC}:0") == "2,000"
    generation = page.locator(f"#queues tr[data-queue='{DEMO_TOPIC}:0'] td").nth(9)  # type: ignore[attr-defined]
    assert generation.inner_text() == "1"
    marker = page.locator("#chart .reset-marker")  # type: ignore[attr-defined]
    assert marker.count() == 1 and marker.is_visible()
    marker.hover()
    tip = page.locator("#chart .reset-tip")  # type: ignore[attr-defined]
    assert tip.is_visible()
    text = tip.inner_text()
    assert "INC-9 replay the last 500" in text and "orders:3 2500 -> 2000" in text
    shots.take(page, "console-reset-marker")
    reset_rows = page.locator("#history-rows tbody tr[data-kind='reset']")  # type: ignore[attr-defined]
    assert reset_rows.count() == 4  # the history was refreshed too


def test_executing_a_plan_after_its_queues_moved_is_refused(demo_server: Server,
                                                            page: object) -> None:
    open_page(page, demo_server.url + "/console/group.html?group=analytics")
    plan_shift_back(page, 100)
    before = committed(page, f"{DEMO_TOPIC}:1")
    with demo_server.client() as c:  # the consumer commits after the plan was shown
        c.pull("analytics", DEMO_TOPIC, 1, client="analytics-2", max=32)
        assert c.commit("analytics", DEMO_TOPIC, 1, 2010, client="analytics-2").accepted
    page.fill("#reset-reason", "replay")  # type: ignore[attr-defined]
    page.click("#reset-execute")  # type: ignore[attr-defined]
    status = page.wait_for_selector("#reset-status.error")  # type: ignore[attr-defined]
    assert status.inner_text() == (
        "Refused, nothing changed: stale plan: queue orders:1 of group 'analytics' was planned "
        f"from offset {before.replace(',', '')} and is now at 2010: plan the reset again.")
    with demo_server.client() as c:
        assert c.history(group="analytics", kind="reset") == []


def test_a_group_named_with_a_percent_is_the_group_the_console_resets(demo_server: Server,
                                                                      page: object) -> None:
    """`%` is a name character: the console's URLs carry `a%41` as `a%2541`, which the server
    used to decode twice and reset group `aA`. The tokenless console's reset names its actor."""
    with demo_server.client() as c:
        assert not [r for r in c.commands([
            {"op": "commit", "group": g, "topic": DEMO_TOPIC, "queue_id": 0, "offset": 900}
            for g in ("a%41", "aA")]) if "error" in r]
    open_page(page, demo_server.url + "/console/group.html?group=a%2541")
    assert committed(page, f"{DEMO_TOPIC}:0") == "900"
    page.fill("#reset-topics", f"{DEMO_TOPIC}:0")  # type: ignore[attr-defined]
    page.select_option("#reset-scenario", "shift_by")  # type: ignore[attr-defined]
    page.fill("#reset-number", "-100")  # type: ignore[attr-defined]
    page.click("#reset-plan")  # type: ignore[attr-defined]
    page.wait_for_selector("#reset-summary")  # type: ignore[attr-defined]
    page.fill("#reset-reason", "percent")  # type: ignore[attr-defined]
    page.click("#reset-execute")  # type: ignore[attr-defined]
    page.wait_for_selector("#reset-status.ok-msg")  # type: ignore[attr-defined]
    with demo_server.client() as c:
        [reset] = c.history(group="a%41", kind="reset")
        assert (reset["offset"], reset["actor"]) == (800, "loopback")
        assert c.history(group="aA", kind="reset") == []
        assert [c.progress(g)[0]["committed_offset"] for g in ("aA", "a%41")] == [900, 800]
