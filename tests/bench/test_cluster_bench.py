"""The cluster bench's feed and model (the bench itself runs in `make bench`)."""

from __future__ import annotations

from bench.cluster_bench import Feed, balance, model, quiet_ratio


def test_a_feed_raises_every_keys_offset_and_keeps_to_its_groups() -> None:
    feed = Feed(1, 4)
    last: dict[tuple[str, str, int], int] = {}
    for _ in range(40):
        for c in feed.batch():
            key = (c["group"], c["topic"], c["queue_id"])
            assert c["offset"] > last.get(key, -1)
            last[key] = c["offset"]
            assert int(c["group"].split("-")[1]) % 4 == 1


def test_the_model_scales_by_shards_and_balance() -> None:
    assert balance(1) == 1.0 and 0 < balance(32) < balance(4) <= 1.0
    cost = {"server_cpu_us_per_commit": 10.0, "router_cpu_us_per_commit": 2.0,
            "feed_cpu_us_per_commit": 0.0}
    rows = model(cost, 2)
    assert rows[0]["commits_per_s"] == 2e5 * balance(2)
    assert abs(rows[1]["router_cores"] - rows[1]["commits_per_s"] * 2e-6) < 1e-9
    # one server is one core (1e5/s); two cores over 12 us a commit: 1.67e5/s
    assert round(quiet_ratio(cost, cost, 2), 3) == round((2e6 / 12) / 1e5, 3)
