"""History, `at` and lag answer what the reference model says (tests/support/reference.py; lag:
the plain evaluation of tests/support/lag_reference.py), and the same, however the log is laid
out and read: live (sealed segments clustered by group plus the active tail), all sealed,
compacted (runs of segments merged into the clustered layout, as `compact` writes it), and
reopened as a writer, as a reader with the read index and as a reader without it."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ledger import Ledger
from tests.support.clock import T0, FakeClock
from tests.support.compacting import compact_in_place
from tests.support.faults import NoSyncFS
from tests.support.lag_reference import reference as lag_reference
from tests.support.oracle import model_run, rows
from tests.support.reference import EVENT_COLUMNS, ReferenceLedger
from tests.support.strategies import OFFSETS_RETENTION_MS, property_settings, streams

GROUPS = ("g1", "g2")


def shown(event: dict[str, Any]) -> tuple:
    """An event as history shows it (the model's columns; actor defaults to the client)."""
    e = dict(event)
    e["actor"] = e["actor"] if e["actor"] is not None else e["client_id"]
    return tuple(e[c] for c in EVENT_COLUMNS)


class Questions:
    """The reads that name a group or a key, and what the model answers to them."""

    def __init__(self, model: ReferenceLedger, lines: list[dict], data: st.DataObject) -> None:
        self.model = model
        stamps = sorted({line["ts"] for line in lines})
        self.times = sorted({T0 - 1, stamps[-1] + 200_000,
                             *data.draw(st.lists(st.sampled_from(stamps), min_size=1,
                                                 max_size=3), label="times")})
        lo = data.draw(st.sampled_from(stamps), label="since")
        hi = data.draw(st.sampled_from([s for s in stamps if s >= lo]), label="until")
        self.window = (lo, hi)
        self.limit = data.draw(st.integers(0, 6), label="limit")
        self.queue = data.draw(st.sampled_from([("t", 0), ("t", 1)]), label="queue")
        self.group = data.draw(st.sampled_from(GROUPS), label="group")
        self.lag_at = data.draw(st.sampled_from(self.times[1:]), label="lag at")

    def history(self, group: str | None = None, topic: str | None = None,
                queue_id: int | None = None, since: int | None = None,
                until: int | None = None, limit: int | None = None) -> list[tuple]:
        found = [shown(e) for e in self.model.events
                 if (group is None or e["consumer_group"] == group)
                 and (topic is None or e["topic"] == topic)
                 and (queue_id is None or e["queue_id"] == queue_id)
                 and (since is None or e["ts"] >= since) and (until is None or e["ts"] <= until)]
        return found if limit is None else found[max(0, len(found) - limit):] if limit else []

    def check(self, led: Ledger, events: list[dict[str, Any]], where: str) -> None:
        """Every question, asked of `led`, against the model (`events`: the log, for lag)."""
        lo, hi = self.window
        t, q = self.queue
        got = {"all": led.history(), "window": led.history(since_ms=lo, until_ms=hi)}
        want = {"all": self.history(), "window": self.history(since=lo, until=hi)}
        for g in GROUPS:
            got[g] = led.history(group=g)
            want[g] = self.history(group=g)
            got[f"{g} window"] = led.history(group=g, since_ms=lo, until_ms=hi)
            want[f"{g} window"] = self.history(group=g, since=lo, until=hi)
            got[f"{g} key newest"] = led.history(group=g, topic=t, queue_id=q, limit=self.limit)
            want[f"{g} key newest"] = self.history(group=g, topic=t, queue_id=q,
                                                   limit=self.limit)
        for name, table in got.items():
            assert [tuple(r) for r in rows(table.select(list(EVENT_COLUMNS)))] == want[name], (
                where, "history", name)
        g = self.group
        for at in self.times:
            assert rows(led.state_at(ts=at)) == self.model.state_at(at), (where, "at", at)
            assert rows(led.state_at(ts=at, group=g)) == self.model.state_at(at, g), (
                where, "at", at, g)
        assert led.lag(group=g, at_ms=self.lag_at, window=3) == lag_reference(
            events, self.lag_at, 3, 0, g), (where, "lag", self.lag_at, g)


@property_settings(share=0.2)
@given(lines=streams(max_size=80, groups=GROUPS, topics=("t",)), data=st.data())
def test_reads_answer_the_model_however_the_log_is_laid_out_and_read(tmp_path_factory, lines,
                                                                     data):
    model, _ = model_run(lines, clock_ms=T0, offsets_retention_ms=OFFSETS_RETENTION_MS)
    questions = Questions(model, lines, data)
    root = tmp_path_factory.mktemp("layout")
    settings = {"offsets_retention_ms": OFFSETS_RETENTION_MS, "durability": "none"}
    with Ledger.open(root, backfill=True, clock=FakeClock(), fs=NoSyncFS(), segment_events_max=7,
                     checkpoint_interval_events=11, **settings) as led:
        list(led.apply(lines))
        events = led.log.read().to_pylist()
        questions.check(led, events, "live: sealed segments and a tail")
        led.log.roll()
        questions.check(led, events, "all sealed")
        merged = compact_in_place(led)
        questions.check(led, events, f"compacted ({merged} runs)")
    with Ledger.open(root, backfill=True, clock=FakeClock(), fs=NoSyncFS()) as led:
        questions.check(led, events, "reopened as the writer")
    for read_index in (True, False):
        with Ledger.open(root, clock=FakeClock(), readonly=True, read_index=read_index) as led:
            questions.check(led, events, f"a reader, read index {read_index}")
