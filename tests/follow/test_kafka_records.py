"""The decoder of `__consumer_offsets` records against byte fixtures of every key and value
version (tests/follow/fixtures/README.md says where each comes from)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from ledger.importers.kafka_records import (
    GroupMetadata,
    UndecodableRecord,
    assigned_partitions,
    decode_record,
    owners,
)

FIXTURES = [json.loads(line) for line in
            (Path(__file__).parent / "fixtures" / "records.ndjson").read_text().splitlines()]


def _bytes(hex_text: str | None) -> bytes | None:
    return None if hex_text is None else bytes.fromhex(hex_text)


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f["name"] for f in FIXTURES])
def test_every_fixture_decodes_to_what_it_says(fixture: dict) -> None:
    expect = dict(fixture["expect"])
    key, value = _bytes(fixture["key"]), _bytes(fixture["value"])
    if "error" in expect:
        with pytest.raises(UndecodableRecord, match=expect["error"]):
            decode_record(key, value)
        return
    record = decode_record(key, value)
    assert type(record).__name__ == expect.pop("type")
    assignments = expect.pop("assignment_of", None)
    members = expect.pop("members", None)
    got = msgspec.to_builtins(record)
    for name, wanted in expect.items():
        assert got[name] == wanted, name
    if members is not None:
        assert isinstance(record, GroupMetadata)
        assert [{k: m[k] for k in want} for m, want in zip(got["members"], members,
                                                           strict=True)] == members
    if assignments is not None:
        assert isinstance(record, GroupMetadata)
        assert {m.member_id: [list(tp) for tp in assigned_partitions(m.assignment)]
                for m in record.members} == assignments


def test_every_value_version_of_both_record_kinds_is_covered() -> None:
    versions = {(f["expect"].get("type"), f["expect"].get("value_version")) for f in FIXTURES}
    for kind in ("OffsetCommit", "GroupMetadata"):
        assert {v for k, v in versions if k == kind} == {0, 1, 2, 3, 4}


def test_owners_map_each_assigned_partition_to_its_client() -> None:
    record = decode_record(*(_bytes(f[k]) for f in FIXTURES if f["name"] ==
                             "group_metadata_value_v4" for k in ("key", "value")))
    assert isinstance(record, GroupMetadata)
    assert owners(record) == {("orders", 0): "c1", ("orders", 2): "c1", ("orders", 1): "c2"}


@pytest.mark.parametrize("cut", range(1, 40, 3))
def test_a_record_cut_anywhere_is_undecodable_never_a_crash(cut: int) -> None:
    f = next(f for f in FIXTURES if f["name"] == "group_metadata_value_v4")
    value = bytes.fromhex(f["value"])
    with pytest.raises(UndecodableRecord):
        decode_record(bytes.fromhex(f["key"]), value[:cut])
