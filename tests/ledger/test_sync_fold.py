"""Syncs fold column-wise (ledger/executor/sync_fold.py) and write what the per-command fold
writes: the same log (every column), the same results, the same state, on random mixes of
syncs, commits, pulls and appends; with a reset policy that refuses some moves back, and on a
broadcast group. Most syncs of a sync feed take the column path."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from ledger import Ledger
from tests.ledger.column_paths import (
    ROWS,
    assert_answers_as_per_command,
    both_paths,
    counted,
    typed_path,
)
from tests.support.clock import T0, FakeClock


def _stream(seed: int, *, syncs: float = 0.8, broadcast: bool = False) -> list[dict[str, Any]]:
    """Syncs on 320 keys; commits, pulls and appends mostly on other groups' keys, now and
    then on a synced key (which then folds per command in its run)."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    if broadcast:
        out.append({"op": "group_set", "group": "s0", "mode": "broadcast", "ts": T0})

    def key(prefix: str) -> dict[str, Any]:
        return {"group": f"{prefix}{rng.randrange(20)}", "topic": rng.choice(["t", "u"]),
                "queue_id": rng.randrange(8)}

    for i in range(ROWS):
        r = rng.random()
        ts = T0 + i // 3
        if r < syncs:
            line = {"op": "sync", **key("s"), "offset": rng.randrange(0, 3000),
                    "source": rng.choice(["kafka:c1/x@y", "mirror"]), "ts": ts}
            if rng.random() < 0.5:
                line["client"] = f"c{rng.randrange(3)}"
            if rng.random() < 0.002:
                line["offset"] = None  # absent in a table (null): an error, per command
            out.append(line)
            continue
        on = key("s" if rng.random() < 0.02 else "h")
        if r < syncs + 0.08:
            out.append({"op": "commit", **on, "offset": rng.randrange(0, 3000), "ts": ts})
        elif r < syncs + 0.14:
            out.append({"op": "pull", **on, "client": f"c{rng.randrange(3)}", "ts": ts})
        else:
            out.append({"op": "queue_append", "topic": on["topic"], "queue_id": on["queue_id"],
                        "count": rng.randrange(1, 500), "ts": ts})
    return out


@pytest.fixture
def folded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Syncs folded column-wise, counted."""
    return counted(monkeypatch, "fold_syncs")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_syncs_fold_column_wise_as_per_command(tmp_path: Path, folded: list[int],
                                               seed: int) -> None:
    lines = _stream(seed)
    per_command, by_columns = both_paths(tmp_path, lines)
    assert by_columns[0] == per_command[0]
    assert by_columns[1].equals(per_command[1])
    assert by_columns[2] == per_command[2]
    kinds = pc.value_counts(by_columns[1].column("kind")).to_pylist()
    assert {k["values"] for k in kinds} >= {"sync", "commit", "pull", "queue_append"}
    assert any(r.get("error") == "sync needs offset" for r in by_columns[0])
    # the commits and pulls pin some keys per command; the syncs of the others fold as columns
    n_syncs = sum(line["op"] == "sync" for line in lines)
    assert sum(folded) > n_syncs // 3


def test_a_sync_feed_folds_nearly_all_column_wise(tmp_path: Path, folded: list[int]) -> None:
    lines = _stream(4, syncs=1.0)
    per_command, by_columns = both_paths(tmp_path, lines)
    assert by_columns[0] == per_command[0] and by_columns[2] == per_command[2]
    assert by_columns[1].equals(per_command[1])
    unchanged = [r for r in by_columns[0] if r.get("changed") is False]
    assert unchanged and all("seq" not in r for r in unchanged)  # nothing written for them
    assert sum(folded) >= 0.97 * len(lines)


def test_moves_back_a_reset_policy_refuses_are_refused_as_per_command(
        tmp_path: Path, folded: list[int]) -> None:
    lines = _stream(5, syncs=1.0)
    per_command, by_columns = both_paths(tmp_path, lines, policy="[limits]\nmax_rewind_messages = 1500\n")
    assert by_columns[0] == per_command[0]
    assert by_columns[1].equals(per_command[1])
    assert by_columns[2] == per_command[2]
    refused = [r for r in by_columns[0] if r.get("refused") == "policy"]
    assert refused and all("max_rewind" in r["error"] for r in refused)
    assert sum(folded) > 0  # the keys without a refused move back still fold as columns
    details = [json.loads(d) for d in by_columns[1].filter(pc.equal(
        by_columns[1].column("kind"), "reset_refused")).column("detail").to_pylist()]
    assert len(details) == len(refused) and all(d["mode"] == "sync" for d in details)


def test_a_broadcast_groups_syncs_name_no_client(tmp_path: Path, folded: list[int]) -> None:
    lines = _stream(6, syncs=1.0, broadcast=True)
    per_command, by_columns = both_paths(tmp_path, lines)
    assert by_columns[0] == per_command[0]
    assert by_columns[1].equals(per_command[1])
    assert by_columns[2] == per_command[2]
    synced = by_columns[1].filter(pc.equal(by_columns[1].column("kind"), "sync"))
    clients = synced.filter(pc.equal(synced.column("consumer_group"), "s0"))
    assert clients.num_rows and clients.column("client_id").null_count == clients.num_rows
    assert sum(folded) > 0


def test_the_json_lines_and_the_arrow_results_are_the_per_command_ones(
        tmp_path: Path, folded: list[int]) -> None:
    assert_answers_as_per_command(tmp_path, _stream(7))
    assert sum(folded) > 0


def test_typed_commands_fold_syncs_column_wise_as_per_command(tmp_path: Path,
                                                              folded: list[int]) -> None:
    """Importers and the Kafka follower hand the ledger typed commands: their syncs take the
    column path too (the table built from the commands carries each sync's source), and write
    what the per-command fold writes."""
    lines = _stream(8, syncs=0.95)
    per_command, _ = both_paths(tmp_path, lines)
    folded.clear()
    typed = typed_path(tmp_path / "typed", lines)
    assert typed[0] == per_command[0]
    assert typed[1].equals(per_command[1])
    assert typed[2] == per_command[2]
    n_syncs = sum(line["op"] == "sync" for line in lines)
    assert sum(folded) > n_syncs // 2


def test_an_offsets_import_folds_its_syncs_column_wise(tmp_path: Path,
                                                       folded: list[int]) -> None:
    """`import kafka-offsets` of a dump: nearly every commit record is a sync folded as
    columns, and the summary counts them as changed."""
    from ledger.importers.kafka_offsets import parse_kafka_offsets

    text = "".join(
        f"[g{i % 50},t,{i % 4}]::OffsetAndMetadata(offset={i + 1}, leaderEpoch=Optional.empty, "
        f"metadata=, commitTimestamp={T0 + i}, expireTimestamp=None)\n" for i in range(ROWS))
    with Ledger.open(tmp_path, clock=FakeClock(T0 + ROWS)) as led:
        summary = led.submit_import(parse_kafka_offsets(text, "kafka-offsets:test"))
        assert summary["changed"] == ROWS and summary["errors"] == 0
        assert led.log.read().num_rows == ROWS
    assert sum(folded) >= 0.97 * ROWS


def test_syncs_older_than_the_ledgers_last_event_fold_column_wise(tmp_path: Path,
                                                                  folded: list[int]) -> None:
    """A follower's next batch, or an import of older history: every time given is before
    the ledger's last event, so every line is recorded at that time, whichever lines wrote
    events; such a run folds as columns (a table's, typed commands'), as the per-command fold
    writes it."""
    later = T0 + 5_000  # after every line of the stream, within the clock skew
    before = [{"op": "queue_append", "topic": "late", "queue_id": 0, "count": 1, "ts": later}]
    lines = _stream(9, syncs=1.0)
    per_command, by_columns = both_paths(tmp_path, lines, before=before)
    typed = typed_path(tmp_path / "typed", lines, before=before)
    for other in (by_columns, typed):
        assert other[0] == per_command[0]
        assert other[1].equals(per_command[1])
        assert other[2] == per_command[2]
    synced = typed[1].filter(pc.equal(typed[1].column("kind"), "sync"))
    assert set(synced.column("ts").to_pylist()) == {later}
    assert sum(folded) >= 2 * 0.97 * len(lines)  # in the table's run and the typed one
