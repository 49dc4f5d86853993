"""Every rule of DESIGN.md through the public API, with concrete numbers."""

from __future__ import annotations

import pytest

from ledger import InvalidInput, Ledger, RefusedError, Scenario, Scope

T, G = "orders", "billing"


def _queue(led: Ledger, count: int = 200, queue_id: int = 0, topic: str = T) -> None:
    led.queue_append(topic, queue_id, count)


def _committed_at(led: Ledger, offset: int, queue_id: int = 0) -> None:
    """Group at `offset` on queue `queue_id` through a pull and a commit by client c1."""
    led.group_set(G, initial="earliest")
    led.pull(G, T, queue_id, client="c1")
    assert led.commit(G, T, queue_id, offset, client="c1").accepted


# ---------------------------------------------------------------- initial offset
def test_first_pull_with_latest_policy_starts_at_max_offset(ledger):
    _queue(ledger, 200)
    r = ledger.pull(G, T, 0, client="c1")
    assert (r.next_offset, r.count) == (200, 0)
    assert ledger.committed(G, T, 0) == 200
    kinds = ledger.history(group=G).column("kind").to_pylist()
    assert kinds == ["initial", "pull"]


def test_first_pull_with_earliest_policy_starts_at_min_offset(ledger):
    _queue(ledger, 200)
    ledger.queue_truncate(T, 0, 50)
    ledger.group_set(G, initial="earliest")
    r = ledger.pull(G, T, 0, client="c1", max_count=32)
    assert (r.next_offset, r.count) == (50, 32)


def test_timestamp_policy_starts_at_first_message_stored_at_or_after(ledger, clock):
    ledger.queue_append(T, 0, 100, store_ts=1_000)
    ledger.queue_append(T, 0, 100, store_ts=2_000)
    ledger.group_set(G, initial="timestamp:1500")
    assert ledger.pull(G, T, 0, client="c1").next_offset == 100


# ---------------------------------------------------------------- commit
def test_commit_is_increase_only_within_a_generation(ledger):
    _queue(ledger)
    _committed_at(ledger, 100)
    r = ledger.commit(G, T, 0, 90, client="c1")
    assert (r.accepted, r.reason, r.offset) == (False, "stale", 100)
    assert ledger.committed(G, T, 0) == 100


def test_commit_above_max_offset_is_invalid(ledger):
    _queue(ledger, 200)
    _committed_at(ledger, 100)
    r = ledger.commit(G, T, 0, 201, client="c1")
    assert (r.accepted, r.reason) == (False, "invalid")
    assert ledger.commit(G, T, 0, 200, client="c1").accepted


def test_refused_commit_appends_nothing(ledger):
    _queue(ledger)
    _committed_at(ledger, 100)
    before = ledger.log.next_seq
    ledger.commit(G, T, 0, 50, client="c1")
    ledger.commit(G, T, 0, 500, client="c1")
    assert ledger.log.next_seq == before


def test_commit_naming_an_older_generation_is_fenced(ledger):
    _queue(ledger)
    _committed_at(ledger, 100)
    ledger.reset(G, Scenario("to_offset", 10), scope=Scope(topics=((T, None),))).execute()
    r = ledger.commit(G, T, 0, 120, client="c1", generation=0)
    assert (r.accepted, r.reason) == (False, "fenced")


def test_commit_with_negative_offset_is_bad_input(ledger):
    with pytest.raises(InvalidInput, match="-1"):
        ledger.commit(G, T, 0, -1)


# ---------------------------------------------------------------- pull, redelivery
def test_same_client_continues_from_pulled_offset(ledger, clock):
    _queue(ledger)
    _committed_at(ledger, 0)
    r1 = ledger.pull(G, T, 0, client="c1", max_count=32)
    r2 = ledger.pull(G, T, 0, client="c1", max_count=32)
    assert (r1.next_offset, r2.next_offset) == (32, 64)


def test_other_client_restarts_from_committed_offset(ledger):
    _queue(ledger)
    _committed_at(ledger, 10)
    ledger.pull(G, T, 0, client="c1", max_count=32)
    r = ledger.pull(G, T, 0, client="c2", max_count=32)
    assert r.next_offset == 10


def test_same_client_after_client_timeout_restarts_from_committed(ledger, clock):
    _queue(ledger)
    _committed_at(ledger, 10)
    ledger.pull(G, T, 0, client="c1", max_count=32)
    clock.advance(120_001)
    assert ledger.pull(G, T, 0, client="c1").next_offset == 10


def test_commit_without_generation_takes_the_clients_last_pull_generation(ledger):
    _queue(ledger)
    _committed_at(ledger, 100)
    ledger.reset(G, Scenario("to_offset", 50), scope=Scope(topics=((T, None),))).execute()
    ledger.pull(G, T, 0, client="c2")  # clears the pending marker, c2 has generation 1
    r = ledger.commit(G, T, 0, 120, client="c1")  # c1 last pulled at generation 0
    assert (r.accepted, r.reason) == (False, "fenced")
    assert ledger.commit(G, T, 0, 60, client="c2").accepted


def test_operator_commit_is_fenced_only_while_a_reset_is_pending(ledger):
    _queue(ledger)
    _committed_at(ledger, 100)
    ledger.reset(G, Scenario("to_offset", 50), scope=Scope(topics=((T, None),))).execute()
    assert ledger.commit(G, T, 0, 70).reason == "fenced"
    ledger.pull(G, T, 0, client="c1")
    assert ledger.commit(G, T, 0, 70).accepted


# ---------------------------------------------------------------- reset
@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        (Scenario("to_earliest"), 0),
        (Scenario("to_latest"), 200),
        (Scenario("to_current"), 100),
        (Scenario("shift_by", 50), 150),
        (Scenario("shift_by", -150), 0),
        (Scenario("shift_by", 150), 200),
        (Scenario("to_offset", 500), 200),
    ],
)
def test_reset_scenarios_clamp_to_queue_bounds(ledger, scenario, expected):
    _queue(ledger, 200)
    _committed_at(ledger, 100)
    plan = ledger.reset(G, scenario, scope=Scope(topics=((T, None),)))
    assert plan.rows() == [{"consumer_group": G, "topic": T, "queue_id": 0,
                            "from_offset": 100, "to_offset": expected}]
    assert ledger.committed(G, T, 0) == 100  # dry run changed nothing
    plan.execute()
    assert ledger.committed(G, T, 0) == expected


def test_applied_reset_is_picked_up_by_the_next_pull_and_increments_generation(ledger):
    _queue(ledger)
    _committed_at(ledger, 100)
    ledger.pull(G, T, 0, client="c1", max_count=32)
    ledger.reset(G, Scenario("to_offset", 40), scope=Scope(topics=((T, None),))).execute()
    r = ledger.pull(G, T, 0, client="c1", max_count=8)
    assert (r.next_offset, r.generation, r.count) == (40, 1, 8)


def test_reset_to_datetime_uses_message_store_time(ledger):
    ledger.queue_append(T, 0, 100, store_ts=10_000)
    ledger.queue_append(T, 0, 100, store_ts=20_000)
    ledger.queue_append(T, 0, 100, store_ts=30_000)
    _committed_at(ledger, 250)
    plan = ledger.reset(G, Scenario("to_datetime", 15_000), scope=Scope(all_topics=True))
    assert [i.to_offset for i in plan.items] == [100]
    late = ledger.reset(G, Scenario("to_datetime", 99_000), scope=Scope(all_topics=True))
    assert [i.to_offset for i in late.items] == [300]  # after the last message: MaxOffset


def test_reset_by_duration_goes_back_from_now(ledger, clock):
    ledger.queue_append(T, 0, 100, store_ts=clock.now - 60_000)
    ledger.queue_append(T, 0, 100, store_ts=clock.now - 10_000)
    _committed_at(ledger, 200)
    plan = ledger.reset(G, Scenario("by_duration", 30_000), scope=Scope(all_topics=True))
    assert [i.to_offset for i in plan.items] == [100]


def test_backward_only_keeps_queues_it_would_move_forward(ledger):
    _queue(ledger, 200, 0)
    _queue(ledger, 200, 1)
    _committed_at(ledger, 100, 0)
    ledger.pull(G, T, 1, client="c1")
    ledger.commit(G, T, 1, 10, client="c1")
    plan = ledger.reset(G, Scenario("to_offset", 50), scope=Scope(all_topics=True),
                        backward_only=True)
    assert [(i.queue_id, i.from_offset, i.to_offset) for i in plan.items] == [
        (0, 100, 50), (1, 10, 10)]


def test_topic_with_queue_list_resets_only_those_queues(ledger):
    for q in range(3):
        _queue(ledger, 200, q)
        _committed_at(ledger, 100, q)
    plan = ledger.reset(G, Scenario("to_earliest"), scope=Scope(topics=((T, (1,)),)))
    assert [i.queue_id for i in plan.items] == [1]


def test_shift_by_without_committed_offset_is_an_error(ledger):
    _queue(ledger, 200)
    with pytest.raises(InvalidInput, match="no committed offset"):
        ledger.reset(G, Scenario("shift_by", 5), scope=Scope(topics=((T, None),)))


def test_to_current_without_committed_offset_gives_max_offset(ledger):
    _queue(ledger, 200)
    plan = ledger.reset(G, Scenario("to_current"), scope=Scope(topics=((T, None),)))
    assert [(i.from_offset, i.to_offset) for i in plan.items] == [(None, 200)]


def test_reset_to_state_at_replays_the_groups_own_past(ledger, clock):
    _queue(ledger, 1000)
    _committed_at(ledger, 100)
    t_past = clock.advance(1000)
    clock.advance(1000)
    ledger.commit(G, T, 0, 700, client="c1")
    plan = ledger.reset(G, Scenario("to_state_at", t_past), scope=Scope(all_topics=True))
    assert [(i.from_offset, i.to_offset) for i in plan.items] == [(700, 100)]


def test_reset_on_sync_only_queue_to_earliest_is_refused_naming_the_queue(ledger):
    ledger.sync([(G, "mirror", 3, 40)], source="dc1")
    with pytest.raises(RefusedError, match="mirror:3"):
        ledger.reset(G, Scenario("to_earliest"), scope=Scope(all_topics=True))


# ---------------------------------------------------------------- clamping, retention
def test_offset_below_min_offset_is_clamped_on_pull(ledger):
    _queue(ledger, 200)
    _committed_at(ledger, 20)
    ledger.queue_truncate(T, 0, 120)
    assert ledger.progress(G)[0]["behind_retention"] is True
    r = ledger.pull(G, T, 0, client="c2", max_count=10)
    assert r.next_offset == 120
    clamp = ledger.history(group=G, kind="clamp").to_pylist()
    assert [(c["prev_offset"], c["offset"]) for c in clamp] == [(20, 120)]


def test_idle_offsets_expire_and_restart_from_min_offset(ledger, clock):
    _queue(ledger, 200)
    ledger.group_set(G, initial="latest")
    ledger.pull(G, T, 0, client="c1")
    ledger.queue_truncate(T, 0, 30)
    clock.advance(7 * 24 * 3600 * 1000 + 1)
    r = ledger.pull(G, T, 0, client="c1", max_count=5)
    assert r.next_offset == 30  # MinOffset, whatever the initial policy
    kinds = ledger.history(group=G).column("kind").to_pylist()
    assert kinds[-3:] == ["expire", "initial", "pull"]
    assert ledger.history(group=G, kind="initial").column("detail")[-1].as_py() == "after expiry"


def test_retention_command_expires_idle_offsets(ledger, clock):
    _queue(ledger, 200)
    _committed_at(ledger, 50)
    clock.advance(3_600_000)
    out = ledger.retention(offsets_retention_ms=1_000)
    assert out["offsets_expired"] == 1
    assert ledger.committed(G, T, 0) is None


# ---------------------------------------------------------------- broadcast
def test_broadcast_group_offset_is_minimum_over_live_clients(ledger, clock):
    _queue(ledger, 200)
    ledger.group_set(G, mode="broadcast", initial="earliest")
    ledger.pull(G, T, 0, client="a")
    ledger.pull(G, T, 0, client="b")
    ledger.commit(G, T, 0, 80, client="a")
    ledger.commit(G, T, 0, 30, client="b")
    assert ledger.committed(G, T, 0) == 30
    clock.advance(60_000)
    ledger.commit(G, T, 0, 90, client="a")
    clock.advance(61_000)  # b silent for 121 s: beyond the 120 s client timeout
    assert ledger.committed(G, T, 0) == 90


def test_new_broadcast_client_starts_from_the_groups_offset(ledger):
    _queue(ledger, 200)
    ledger.group_set(G, mode="broadcast", initial="earliest")
    ledger.pull(G, T, 0, client="a")
    ledger.commit(G, T, 0, 70, client="a")
    assert ledger.pull(G, T, 0, client="b").next_offset == 70


def test_broadcast_reset_sets_every_known_client(ledger):
    _queue(ledger, 200)
    ledger.group_set(G, mode="broadcast", initial="earliest")
    for c, off in (("a", 80), ("b", 60)):
        ledger.pull(G, T, 0, client=c)
        ledger.commit(G, T, 0, off, client=c)
    ledger.reset(G, Scenario("to_offset", 10), scope=Scope(all_topics=True)).execute()
    assert ledger.pull(G, T, 0, client="a").next_offset == 10
    assert ledger.pull(G, T, 0, client="b").next_offset == 10
    assert ledger.commit(G, T, 0, 15, client="a", generation=0).reason == "fenced"


# ---------------------------------------------------------------- sync, delete
def test_sync_overwrites_and_unchanged_keys_append_nothing(ledger):
    _queue(ledger, 300)
    _committed_at(ledger, 100)
    changes = ledger.sync([(G, T, 0, 250)], source="broker-a")
    assert changes == [{"consumer_group": G, "topic": T, "queue_id": 0,
                        "from_offset": 100, "to_offset": 250}]
    seq = ledger.log.next_seq
    assert ledger.sync([(G, T, 0, 250)], source="broker-a") == []
    assert ledger.log.next_seq == seq
    row = ledger.history(kind="sync").to_pylist()[0]
    assert (row["prev_offset"], row["offset"], row["actor"]) == (100, 250, "sync:broker-a")


def test_group_delete_removes_offsets_and_fences_racing_clients(ledger):
    _queue(ledger, 300)
    _committed_at(ledger, 100)
    assert ledger.group_delete(G, actor="ops")["queues_deleted"] == 1
    assert ledger.committed(G, T, 0) is None
    assert ledger.commit(G, T, 0, 120, client="c1").reason == "fenced"
    assert ledger.progress(G) == []


# ---------------------------------------------------------------- reset guardrails
def _policy(ledger: Ledger, text: str) -> None:
    (ledger.root / "reset-policy.toml").write_text(text)


def test_policy_refuses_an_actor_not_allowed_and_records_the_attempt(ledger):
    _queue(ledger)
    _committed_at(ledger, 100)
    _policy(ledger, '[[allow]]\nactors = ["ops-*"]\ngroups = ["bill*"]\n')
    plan = ledger.reset(G, Scenario("to_offset", 10), scope=Scope(all_topics=True), actor="mallory")
    with pytest.raises(RefusedError, match="permission"):
        plan.execute()
    assert ledger.committed(G, T, 0) == 100
    refused = ledger.history(kind="reset_refused").to_pylist()
    assert [(r["actor"], r["consumer_group"]) for r in refused] == [("mallory", G)]
    ok = ledger.reset(G, Scenario("to_offset", 10), scope=Scope(all_topics=True), actor="ops-ann")
    ok.execute()
    assert ledger.committed(G, T, 0) == 10


def test_policy_limits_rewind_unless_forced(ledger):
    _queue(ledger)
    _committed_at(ledger, 100)
    _policy(ledger, "[limits]\nmax_rewind_messages = 50\n")
    plan = ledger.reset(G, Scenario("shift_by", -60), scope=Scope(all_topics=True), actor="ops")
    assert (plan.messages_replayed, plan.messages_skipped) == (60, 0)
    with pytest.raises(RefusedError, match="max_rewind"):
        plan.execute()
    plan.execute(force=True)
    assert ledger.committed(G, T, 0) == 40


def test_policy_rate_limits_resets_per_group(ledger, clock):
    _queue(ledger)
    _committed_at(ledger, 100)
    _policy(ledger, '[limits]\nresets_per_group = 2\nwindow = "PT1H"\n')
    for _ in range(2):
        ledger.reset(G, Scenario("to_offset", 10), scope=Scope(all_topics=True)).execute()
        clock.advance(1000)
    with pytest.raises(RefusedError, match="rate"):
        ledger.reset(G, Scenario("to_offset", 10), scope=Scope(all_topics=True)).execute()
    clock.advance(3_600_000)
    ledger.reset(G, Scenario("to_offset", 20), scope=Scope(all_topics=True)).execute()
    assert ledger.committed(G, T, 0) == 20


# ---------------------------------------------------------------- history
def test_history_derives_prev_offset_across_clients_of_a_clustering_group(ledger, clock):
    _queue(ledger, 300)
    _committed_at(ledger, 100)  # c1 pulled from 0 and committed 100
    clock.advance(1000)
    ledger.pull(G, T, 0, client="c2", max_count=50)  # another client: from committed 100
    ledger.commit(G, T, 0, 150, client="c2")
    rows = ledger.history(group=G, kind="commit").to_pylist()
    assert [(r["client_id"], r["prev_offset"], r["offset"]) for r in rows] == [
        ("c1", 0, 100), ("c2", 100, 150)]
    pulls = ledger.history(group=G, kind="pull").to_pylist()
    assert [(r["prev_offset"], r["offset"]) for r in pulls] == [(0, 32), (32, 150)]
    window = ledger.history(group=G, kind="commit", since_ms=clock.now).to_pylist()
    assert [(r["prev_offset"], r["offset"]) for r in window] == [(100, 150)]
    assert ledger.sql("SELECT prev_offset FROM events WHERE kind = 'commit' ORDER BY seq"
                      ).column(0).to_pylist() == [0, 100]


def test_close_twice_is_harmless(tmp_path, clock):
    led = Ledger.open(tmp_path / "d", clock=clock)
    led.queue_append(T, 0, 10)
    led.close()
    led.close()
    with Ledger.open(tmp_path / "d", clock=clock) as again:
        assert again.queues() == [{"topic": T, "queue_id": 0, "min_offset": 0, "max_offset": 10}]


def test_a_failing_view_flush_does_not_fail_a_durable_append(ledger, monkeypatch):
    import duckdb
    import msgspec

    def broken(*_a, **_k):
        raise duckdb.IOException("disk gone")

    monkeypatch.setattr(ledger.view, "flush_in_background", broken)  # the periodic flush
    monkeypatch.setattr(ledger.writer, "settings", msgspec.structs.replace(ledger.settings,
                                                                    view_flush_batches=1))
    seq = ledger.log.next_seq
    ledger.queue_append(T, 0, 10)  # acknowledged although the view could not be written
    assert ledger.log.next_seq == seq + 1
    monkeypatch.undo()
    assert ledger.queues()[0]["max_offset"] == 10  # the next read flushes the touched rows


def test_events_convert_to_arrow_and_back(ledger):
    from ledger.fold.events import Commit, Reset, from_arrow, to_record_batch

    events = [Commit(ts=5, consumer_group=G, topic=T, queue_id=1, offset=7, generation=0,
                     client_id="c1"),
              Reset(ts=6, consumer_group=G, topic=T, queue_id=1, offset=3, prev_offset=7,
                    generation=1, actor="ops", detail='{"mode":"to_offset"}')]
    batch = to_record_batch(events, first_seq=40)
    assert batch.column("seq").to_pylist() == [40, 41]
    back = from_arrow(batch)
    assert [type(e) for e in back] == [Commit, Reset]
    assert back[1].prev_offset == 7 and back[0].client_id == "c1" and back[1].seq == 41
