"""Compaction of a ledger root whose sealed segments live in S3 (moto on loopback): Spark reads
local copies of the objects, the compacted files are uploaded before the manifest names them,
and the replaced objects are deleted once no manifest lists them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger import Ledger
from spark_compaction import compact
from tests.objectstore.conftest import BUCKET, S3, prefix, s3  # noqa: F401 (fixtures)
from tests.support.cli import Cli

pytestmark = pytest.mark.spark


def test_compaction_of_an_s3_root(spark, tmp_path: Path, s3: S3, prefix: str) -> None:  # noqa: F811
    root = tmp_path / "data"
    with Ledger.open(root, segments=f"s3://{BUCKET}/{prefix}", segments_endpoint=s3.endpoint,
                     segment_events_max=40) as led:
        led.group_set("g", initial="earliest")
        for step in range(60):
            led.queue_append("t", step % 3, 10, store_ts=1_000_000 + step)
            led.pull("g", "t", step % 3, client="c1")
            led.commit("g", "t", step % 3, 5 + 10 * (step // 3), client="c1")
    cli = Cli(root)
    before = cli.json("history", "--group", "g")
    old = {k for k in s3.keys(prefix) if k.startswith("log/0")}
    assert len(old) >= 4, old

    out = compact(root, target_events=200, target_bytes=10**9, row_group_events=32)
    assert len(out["roots"][0]["runs"]) >= 1, out

    now = {k for k in s3.keys(prefix) if k.startswith("log/0")}
    with Ledger.open(root, readonly=True) as led:
        listed = {f"log/{s.path.name}" for s in led.log.segments()}
    assert now == listed and len(now) < len(old), (old, now)
    assert cli.json("history", "--group", "g") == before
    assert cli.json("verify")["ok"] is True
