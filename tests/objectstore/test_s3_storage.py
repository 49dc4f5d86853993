"""The log on an object store (moto's S3 on loopback): uploads before the manifest names them,
the manifest's conditional put against a stale writer, kill -9 between upload and manifest
commit, and missing objects named by their key."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage import (
    CorruptSegmentError,
    LogSettings,
    ManifestConflictError,
    ObjectLocation,
    ObjectStoreFileSystem,
)
from storage.verify import verify_log
from tests.objectstore.conftest import BUCKET, S3
from tests.storage.storage_helpers import SCHEMA, concat, make_rows, open_log, with_seqs

SETTINGS = LogSettings(segment_events_max=100)
WORKTREE = Path(__file__).resolve().parents[2]


def bucket_fs(root: Path, s3: S3, prefix: str) -> ObjectStoreFileSystem:
    return ObjectStoreFileSystem(root, ObjectLocation(BUCKET, prefix), endpoint=s3.endpoint)


def manifest_url(prefix: str) -> str:
    return f"s3://{BUCKET}/{prefix}/log/MANIFEST"


def test_sealed_files_are_objects_and_reopen_reads_them(tmp_path: Path, s3: S3,
                                                        prefix: str) -> None:
    root = tmp_path / "data"
    rows = [make_rows(60, salt=i) for i in range(4)]
    with open_log(root, SETTINGS, fs=bucket_fs(root, s3, prefix)) as log:
        for batch in rows:
            log.append(batch)
        log.write_checkpoint(100, SCHEMA.empty_table())
        log.roll()
    assert s3.keys(prefix) == [
        "checkpoints/00000000000000000100.checkpoint.parquet", "log/00000000000000000000.parquet",
        "log/00000000000000000100.parquet", "log/00000000000000000200.parquet", "log/MANIFEST"]
    assert not list((root / "log").glob("*.parquet"))
    expected = concat([with_seqs(b, 60 * i) for i, b in enumerate(rows)])
    with open_log(root, writer=False, fs=bucket_fs(root, s3, prefix)) as reader:
        assert reader.read().equals(expected)
        assert reader.read_checkpoint(100).num_rows == 0
        # what DuckDB and Spark open: local copies of the objects, byte for byte
        copies = reader.segment_paths()
        assert all(p.is_file() and "s3-cache" in p.parts for p in copies)
    assert verify_log(root, SCHEMA, bucket_fs(root, s3, prefix)).ok


def test_a_stale_writer_loses_the_race_and_overwrites_nothing(tmp_path: Path, s3: S3,
                                                              prefix: str) -> None:
    first = open_log(tmp_path / "a", SETTINGS, fs=bucket_fs(tmp_path / "a", s3, prefix))
    stale = open_log(tmp_path / "b", SETTINGS, fs=bucket_fs(tmp_path / "b", s3, prefix))
    ours = make_rows(30)
    first.append(ours)
    first.roll()  # revision 2 lists segment 0
    stale.append(make_rows(30, salt=7))
    with pytest.raises(ManifestConflictError) as lost:  # its segment 0 is already there
        stale.roll()
    message = str(lost.value)
    assert manifest_url(prefix) in message and "revision 1" in message
    assert "revision 2" in message and "\n" not in message
    # a change that uploads a new name gets as far as the manifest's conditional put
    with pytest.raises(ManifestConflictError, match="revision 2"):
        stale.write_checkpoint(30, SCHEMA.empty_table())
    assert not any(k.startswith("checkpoints/") for k in s3.keys(prefix)), s3.keys(prefix)
    stale._abandon()
    first.close()
    with open_log(tmp_path / "a", SETTINGS, fs=bucket_fs(tmp_path / "a", s3, prefix)) as log:
        assert log.read().equals(with_seqs(ours, 0).combine_chunks())
    assert verify_log(tmp_path / "a", SCHEMA, bucket_fs(tmp_path / "a", s3, prefix)).ok


KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from storage import LogSettings, ObjectLocation, ObjectStoreFileSystem
    from tests.storage.storage_helpers import make_rows, open_log

    class KilledBeforeCommit(ObjectStoreFileSystem):
        def replace_versioned(self, path, data, expected):
            if expected is not None:  # a seal's commit: its segment is uploaded already
                os.kill(os.getpid(), signal.SIGKILL)
            return super().replace_versioned(path, data, expected)

    root, prefix, endpoint = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    fs = KilledBeforeCommit(root, ObjectLocation(sys.argv[4], prefix), endpoint=endpoint)
    log = open_log(root, LogSettings(segment_events_max=100), fs=fs)
    log.append(make_rows(40))
    log.roll()
    print("not killed")
""")


def test_kill_9_between_upload_and_manifest_commit(tmp_path: Path, s3: S3, prefix: str) -> None:
    root = tmp_path / "data"
    done = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(root), prefix, s3.endpoint,
                           BUCKET],
                          cwd=WORKTREE, env=s3.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr)
    orphan = "log/00000000000000000000.parquet"
    assert orphan in s3.keys(prefix)  # uploaded, never listed
    expected = with_seqs(make_rows(40), 0).combine_chunks()
    with open_log(root, writer=False, fs=bucket_fs(root, s3, prefix)) as reader:
        assert reader.segments() == [] and reader.read().equals(expected)  # the WAL's rows
    with open_log(root, SETTINGS, fs=bucket_fs(root, s3, prefix)) as log:
        assert orphan in log.recovery.files_deleted
        assert orphan not in s3.keys(prefix)
        assert log.read().equals(expected)
        log.roll()
    assert orphan in s3.keys(prefix)  # sealed again, listed this time
    assert verify_log(root, SCHEMA, bucket_fs(root, s3, prefix)).ok


def test_a_missing_object_is_named_by_its_key(tmp_path: Path, s3: S3, prefix: str) -> None:
    root = tmp_path / "data"
    with open_log(root, SETTINGS, fs=bucket_fs(root, s3, prefix)) as log:
        log.append(make_rows(150))
        log.roll()
    key = f"{prefix}/log/00000000000000000100.parquet"
    s3.client.delete_object(Bucket=BUCKET, Key=key)
    url = f"s3://{BUCKET}/{key}"
    with open_log(root, writer=False, fs=bucket_fs(root, s3, prefix)) as reader:
        with pytest.raises(CorruptSegmentError, match=f"{url}.*missing"):
            reader.read()
        with pytest.raises(CorruptSegmentError, match=f"{url}.*missing"):
            reader.segments()
    with pytest.raises(CorruptSegmentError, match=f"{url}.*missing"):
        open_log(root, SETTINGS, fs=bucket_fs(root, s3, prefix))
    report = verify_log(root, SCHEMA, bucket_fs(root, s3, prefix))
    assert [p.file for p in report.problems] == [url], report.problems


def test_a_compaction_swap_uploads_the_new_file_and_deletes_the_replaced_objects(
        tmp_path: Path, s3: S3, prefix: str) -> None:
    root = tmp_path / "data"
    with open_log(root, SETTINGS, fs=bucket_fs(root, s3, prefix)) as log:
        log.append(make_rows(300))
        log.roll()
        expected = log.read()
        old = log.segments()[:2]  # local copies of the objects, as a compaction job reads them
        staged = tmp_path / "staged.parquet"
        pq.write_table(pa.concat_tables([pq.read_table(s.path) for s in old]), staged)
        new = log.replace(old, [staged])
        assert [s.base_seq for s in log.segments()] == [0, 200]
        assert log.read().equals(expected)
    keys = s3.keys(prefix)
    assert f"log/{new[0].path.name}" in keys and new[0].path.name != old[0].path.name
    assert f"log/{old[1].path.name}" not in keys  # replaced: listed by no manifest, deleted
    assert verify_log(root, SCHEMA, bucket_fs(root, s3, prefix)).ok


def test_a_second_writer_claims_the_manifest_before_deleting_unlisted_objects(
        tmp_path: Path, s3: S3, prefix: str) -> None:
    live = open_log(tmp_path / "a", SETTINGS, fs=bucket_fs(tmp_path / "a", s3, prefix))
    # an upload the live writer has not listed yet looks like a crash's leftover elsewhere
    in_flight = f"{prefix}/log/00000000000000000000.parquet"
    s3.client.put_object(Bucket=BUCKET, Key=in_flight, Body=b"not listed yet")
    with open_log(tmp_path / "b", SETTINGS, fs=bucket_fs(tmp_path / "b", s3, prefix)) as other:
        assert other.recovery.files_deleted == ("log/00000000000000000000.parquet",)
    # the claim (revision 2) came first, so the live writer can never list what was deleted
    live.append(make_rows(20))
    with pytest.raises(ManifestConflictError, match="revision 1.*revision 2"):
        live.roll()
    live._abandon()
    assert verify_log(tmp_path / "b", SCHEMA, bucket_fs(tmp_path / "b", s3, prefix)).ok
