"""A data directory whose sealed segments, checkpoints and MANIFEST live in S3 (moto on
loopback): every read path answers as the same ledger on a local disk does."""

from __future__ import annotations

import json
from pathlib import Path

from ledger import Ledger
from tests.objectstore.conftest import BUCKET, S3
from tests.support.cli import Cli, assert_one_line_error

T, G = "orders", "billing"
DAY_MS = 86_400_000


def build(cli: Cli, *extra: str) -> None:
    """init (small segments), then queue appends and commits enough to seal several segments."""
    r = cli("init", "--segment-events", "8", *extra)
    assert r.exit_code == 0, r.stderr
    with Ledger.open(cli.data, clock=lambda: 1_000_000) as led:
        led.group_set(G, initial="earliest")
        for step in range(6):
            for q in (0, 1):
                led.queue_append(T, q, 100, store_ts=1_000_000 + step * 60_000)
                led.pull(G, T, q, client="c1")
                assert led.commit(G, T, q, 50 + 100 * step, client="c1").accepted


def scrub(doc: object) -> object:
    """`doc` without `lag_ms` (it counts from the wall clock of the call)."""
    if isinstance(doc, dict):
        return {k: scrub(v) for k, v in doc.items() if k != "lag_ms"}
    if isinstance(doc, list):
        return [scrub(v) for v in doc]
    return doc


def answers(cli: Cli) -> object:
    """The read paths of the CLI, as JSON."""
    return scrub({
        "history": cli.json("history", "--group", G),
        "at": cli.json("at", "1970-01-01T00:03:00Z", "--group", G),
        "lag": cli.json("lag", "--group", G),
        "sql": cli.json("sql", "SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY kind"),
        "progress": cli.json("progress", "--group", G),
        "lag_at": cli.json("lag", "--group", G, "--at", "1970-01-01T00:20:00Z"),
    })


def test_main_flows_on_s3_answer_as_a_local_ledger(tmp_path: Path, s3: S3, prefix: str) -> None:
    local, remote = Cli(tmp_path / "local"), Cli(tmp_path / "remote")
    url = f"s3://{BUCKET}/{prefix}"
    build(local)
    build(remote, "--segments", url, "--segments-endpoint", s3.endpoint)

    keys = s3.keys(prefix)
    sealed = [k for k in keys if k.startswith("log/") and k.endswith(".parquet")]
    assert "log/MANIFEST" in keys and len(sealed) >= 3, keys
    assert any(k.startswith("checkpoints/") for k in keys), keys
    on_disk = sorted(p.name for p in (remote.data / "log").iterdir())
    assert all(n.endswith(".wal") for n in on_disk), on_disk  # only the WAL stays local
    settings = json.loads((remote.data / "settings.json").read_bytes())
    assert settings["segments"] == url

    expected = answers(local)
    assert answers(remote) == expected  # reopened from the bucket on every command
    assert remote.json("verify")["ok"] is True
    assert remote.json("rebuild") is not None
    assert answers(remote) == expected

    # retention deletes from the bucket what the manifest no longer lists, nothing else
    r = remote.json("retention", "--log-retention", "PT1S")
    assert r["segments_deleted"] >= 1, r
    with Ledger.open(remote.data, readonly=True) as led:
        listed = {s.path.name for s in led.log.segments()}
        start = led.log.start_seq
    left = {k.removeprefix("log/") for k in s3.keys(prefix) if k.endswith(".parquet")
            and k.startswith("log/")}
    assert left == listed and start > 0, (left, listed)
    assert remote.json("verify")["ok"] is True
    # (retention also expired the idle group's offsets: the newest event says so)
    assert remote.json("history", "--group", G)[-1]["kind"] == "expire"


def test_segments_location_is_chosen_once(tmp_path: Path, s3: S3, prefix: str) -> None:
    cli = Cli(tmp_path / "data")
    assert cli("init").exit_code == 0
    r = cli("init", "--segments", f"s3://{BUCKET}/{prefix}")
    assert_one_line_error(r, 2, "invalid segments", "chosen once")
    r = Cli(tmp_path / "other")("init", "--segments", "http://not-s3/x")
    assert_one_line_error(r, 2, "invalid segments", "'http://not-s3/x'")


def test_a_prefix_holding_a_log_is_not_taken_over_by_a_new_data_directory(
        tmp_path: Path, s3: S3, prefix: str) -> None:
    url = f"s3://{BUCKET}/{prefix}"
    first, second = Cli(tmp_path / "first"), Cli(tmp_path / "second")
    build(first, "--segments", url, "--segments-endpoint", s3.endpoint)
    before = {k: s3.client.get_object(Bucket=BUCKET, Key=f"{prefix}/{k}")["ETag"]
              for k in s3.keys(prefix)}
    # its writer elsewhere keeps acknowledged events in its local WAL: a second data
    # directory must not start writing over the same prefix unless told to
    r = second("init", "--segments", url, "--segments-endpoint", s3.endpoint)
    assert_one_line_error(r, 2, f"invalid segments {url!r}", "already holds a ledger's log",
                          "--take-over")
    after = {k: s3.client.get_object(Bucket=BUCKET, Key=f"{prefix}/{k}")["ETag"]
             for k in s3.keys(prefix)}
    assert after == before  # nothing written, the manifest untouched
    assert not (second.data / "settings.json").exists()
    assert first("init").exit_code == 0  # its own data directory reopens as before
    assert first.json("verify")["ok"] is True
    written = first.json("history", "--group", G)
    # once the first writer is gone for good, a take-over is explicit: the sealed events are
    # the second's, what was only in the first's local tail is not
    r = second("init", "--segments", url, "--segments-endpoint", s3.endpoint, "--take-over")
    assert r.exit_code == 0, r.stderr
    taken = second.json("history", "--group", G)
    assert taken and len(taken) < len(written) and taken == written[:len(taken)]
    assert second.json("verify")["ok"] is True


def test_cli_names_a_missing_object(tmp_path: Path, s3: S3, prefix: str) -> None:
    cli = Cli(tmp_path / "data")
    build(cli, "--segments", f"s3://{BUCKET}/{prefix}", "--segments-endpoint", s3.endpoint)
    key = f"{prefix}/log/00000000000000000008.parquet"
    s3.client.delete_object(Bucket=BUCKET, Key=key)
    url = f"s3://{BUCKET}/{key}"
    report = cli.json("verify", code=1)
    assert url in json.dumps(report["problems"]), report["problems"]
    r = cli("history", "--group", G)
    assert_one_line_error(r, 2, url, "missing")


def test_a_cluster_file_places_a_shard_s_segments_in_s3(tmp_path: Path, s3: S3,
                                                         prefix: str) -> None:
    from tests.cluster.conftest import ClusterCli

    url = f"s3://{BUCKET}/{prefix}"
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(f'[[shard]]\nroot = "s0"\nsegments = "{url}"\n\n[[shard]]\nroot = "s1"\n')
    many = ClusterCli(cluster, env={"AWS_ENDPOINT_URL": s3.endpoint})
    r = many("init", "--segment-events", "4")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "s0" / "settings.json").read_bytes())["segments"] == url
    assert json.loads((tmp_path / "s1" / "settings.json").read_bytes())["segments"] is None
    assert "log/MANIFEST" in s3.keys(prefix)
