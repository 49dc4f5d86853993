"""The sealer: a full active segment becomes sealed Parquet segments, in the background or at once.

A seal writes the active WAL's rows as Parquet files on a sealer thread while appends go on; a
later change (or `close`, `roll`, `settle`) publishes them: one manifest commit lists the files
and moves the active segment past them, and the WAL goes. The rows appended while they were
written go into the next WAL, also on the sealer thread, before that change lists both. Until
that commit the WAL is the source, so a crash or a failed write at any step loses nothing (the
next open deletes the unlisted files and seals again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from storage import names
from storage.active import ActiveSegment
from storage.errors import FsyncError, LogFailedError, StorageError
from storage.fs import remove_quietly, sync_dir
from storage.manifest import SegmentEntry
from storage.roll import RollParams, SegmentFacts, should_roll
from storage.schema import TS_COLUMN
from storage.sealed import write_segment
from storage.segments import LogSegments, SegmentInfo
from storage.settings import LogSettings

log = logging.getLogger(__name__)


class _Carried:
    """The WAL after a seal, written ahead by the sealer thread: it holds the active WAL's rows
    from the seal's end up to `end` (fsynced, not yet listed in the manifest)."""

    __slots__ = ("segment", "end")

    def __init__(self, segment: ActiveSegment, end: int) -> None:
        self.segment = segment
        self.end = end


class _SealJob(msgspec.Struct, frozen=True):
    """A seal on the sealer thread: the active WAL's first `rows` rows, as Parquet files whose
    entries `future` yields (not yet listed in the manifest); then, once they are written,
    the rows after them as the next WAL (`carry`)."""

    rows: int
    future: Future[list[SegmentEntry]]
    carry: Future[_Carried] | None = None


def _rows_between(batches: list[pa.RecordBatch], schema: pa.Schema, start: int, stop: int
                  ) -> pa.RecordBatch:
    """Rows [start, stop) of `batches` as one batch (one WAL frame)."""
    rest = pa.Table.from_batches(batches, schema=schema).slice(start, stop - start)
    parts = rest.combine_chunks().to_batches()
    return pa.concat_batches(parts) if len(parts) > 1 else parts[0]


class Sealer:
    """Seals the active segment of `segments`; one seal runs at a time, on one sealer thread.

    Not thread-safe on its own: the log calls it under its lock (only the Parquet writes run on
    the sealer thread, and they touch no shared state).
    """

    def __init__(self, segments: LogSegments, settings: LogSettings, clock: Callable[[], int]):
        self._segments = segments
        self._settings = settings
        self._clock = clock
        self._roll_params = RollParams(
            settings.segment_events_max, settings.segment_bytes_max, settings.segment_age_ms_max
        )
        # The seal being written by the background sealer: the active WAL's first rows, as
        # Parquet files not yet listed (the WAL stays the source until a commit publishes them).
        self._job: _SealJob | None = None
        self._executor: ThreadPoolExecutor | None = None

    # ----------------------------------------------------------------------------- when

    def _unsealed(self) -> tuple[int, int]:
        """Events and (about) bytes of the active segment not being sealed already."""
        active = self._segments.active
        job = self._job
        if job is None or active.events == 0:
            return active.events, active.bytes
        rest = active.events - job.rows
        return rest, active.bytes * rest // active.events

    def _facts(self) -> SegmentFacts:
        events, size = self._unsealed()
        return SegmentFacts(events, size, self._segments.active.rolling_ts_ms)

    def roll_due(self, now_ms: int) -> bool:
        """Whether the rows not being sealed already reached a roll limit (count, size, age)."""
        return should_roll(self._roll_params, self._facts(), now_ms)

    @property
    def running(self) -> bool:
        """A seal was started and is not listed yet (its files may still be being written)."""
        return self._job is not None

    def full(self) -> bool:
        """Whether the rows not being sealed already fill a segment (by count or size)."""
        events, size = self._unsealed()
        return events > 0 and (
            events >= self._settings.segment_events_max
            or size >= self._settings.segment_bytes_max
        )

    # ----------------------------------------------------------------------------- sealing

    def seal(self, *, carry: bool = False) -> list[SegmentInfo]:
        """Seal the active segment now, waiting for the Parquet files (see `_start`)."""
        sealed = self.finish(wait=True)
        if self._start(carry=carry):
            sealed += self.finish(wait=True)
        return sealed

    def _start(self, *, carry: bool) -> bool:
        """Start writing the active segment's rows as Parquet on the sealer thread; False if
        there is nothing to seal. `finish` commits them in the manifest (the seal point).

        Steps: `<base>.parquet.tmp`, fsync, rename (sealer thread); then fsync dir, manifest
        commit, and the WAL is deleted. Until the commit the WAL stays the source: a crash before
        it leaves unlisted Parquet files that the next open deletes, and the seal is redone.

        Sealed segments hold at most `segment_events_max` events. With `carry`, an active segment
        holding more (one append's frame is never split) seals its full segments only, and the
        rest (with whatever is appended meanwhile) is carried into the next WAL at the commit,
        so rolls do not leave small segments behind.
        """
        if self._job is not None:
            raise AssertionError("a seal is already running")
        active = self._segments.active
        if active.events == 0:
            return False
        step = self._settings.segment_events_max
        rows = active.events
        if carry and rows > step:
            rows -= rows % step
        table = pa.Table.from_batches(active.batches(), schema=self._segments.schema).slice(0, rows)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-sealer")
        future = self._executor.submit(self._write_segments, table, active.base_seq)
        self._job = _SealJob(rows, future)
        return True

    def _write_segments(self, table: pa.Table, base_seq: int) -> list[SegmentEntry]:
        """Sealer thread: `table` as Parquet files of at most `segment_events_max` rows, not yet
        listed; each file is removed again if a later one fails (except on a failed fsync)."""
        fs, log_dir = self._segments.fs, self._segments.log_dir
        step = self._settings.segment_events_max
        entries: list[SegmentEntry] = []
        try:
            for offset in range(0, table.num_rows, step):
                piece = table.slice(offset, step)
                base = base_seq + offset
                name = names.parquet_name(base)
                size, crc = write_segment(fs, log_dir / name, piece, self._settings)
                ts = pc.min_max(piece.column(TS_COLUMN))
                entries.append(SegmentEntry(
                    base_seq=base, end_seq=base + piece.num_rows, ts_min=ts["min"].as_py(),
                    ts_max=ts["max"].as_py(), events=piece.num_rows, bytes=size, file=name,
                    crc32c=crc,
                ))
        except Exception as exc:
            if not isinstance(exc, FsyncError):
                for entry in entries:
                    remove_quietly(fs, log_dir / entry.file)
            raise
        return entries

    def finish(self, *, wait: bool) -> list[SegmentInfo]:
        """Commit the running seal's files in the manifest, carrying the WAL's rows after them
        into a new WAL (written and fsynced first); [] if none runs, or (not `wait`) it runs on.

        Without `wait`, a finished seal whose WAL holds rows after it is not listed yet: the
        sealer thread first writes those rows as the next WAL (`_start_carry`), and a later
        change lists both, carrying only the rows appended since. A server's writer thread
        spent 54-82 ms writing and fsyncing a seal's ~100k carried rows while every request
        waited. The WAL it replaces is deleted here (`wait`) or on the sealer thread (an
        append's `publish_finished`). Raises the sealer's error (the WAL stays the source and
        the files are gone)."""
        job = self._job
        if job is None:
            return []
        if not wait:
            if not job.future.done() or (job.carry is not None and not job.carry.done()):
                return []
            if (job.carry is None and job.future.exception() is None
                    and self._segments.active.events > job.rows):
                self._job = msgspec.structs.replace(job, carry=self._start_carry(job))
                return []
        self._job = None
        entries = job.future.result()
        segments = self._segments
        fs = segments.fs
        active = segments.active
        written = [segments.log_dir / e.file for e in entries]
        following, carried = self._carried(job)
        try:
            if carried > job.rows:
                written.append(following.path)
            if active.events > carried:
                if carried == job.rows:
                    if not remove_quietly(fs, following.path):
                        raise StorageError(f"cannot remove the leftover {following.path}")
                    written.append(following.path)
                following.append(_rows_between(active.batches(), segments.schema, carried,
                                               active.events), self._clock())
                following.sync()
            sync_dir(fs, segments.log_dir)
            segments.commit(
                segments=segments.manifest.segments + tuple(entries),
                active_base_seq=following.base_seq,
            )
        except Exception as exc:  # not on KeyboardInterrupt: the commit may have happened
            following.close()
            if not isinstance(exc, FsyncError):
                for path in written:
                    remove_quietly(fs, path)
            raise
        active.close()
        if wait:
            remove_quietly(fs, active.path)
        else:
            self._remove_later(active.path)
        segments.active = following
        segments.active_synced_ms = self._clock()
        return [segments.info(e) for e in entries]

    def _start_carry(self, job: _SealJob) -> Future[_Carried]:
        """Writer thread: hand the rows after the seal, as they are now, to the sealer thread
        (the batches are immutable; later appends add others)."""
        active = self._segments.active
        assert self._executor is not None  # the seal was written on it
        return self._executor.submit(self._write_carry, active.batches(), job.rows,
                                     active.events, active.base_seq + job.rows)

    def _write_carry(self, batches: list[pa.RecordBatch], start: int, stop: int,
                     base_seq: int) -> _Carried:
        """Sealer thread: rows [start, stop) of the active WAL as the next WAL, fsynced. The
        file is not listed until the seal's commit: a crash first leaves a file the next open
        deletes; a failure removes it (and the commit carries every row itself)."""
        segments = self._segments
        following = segments.new_active(base_seq)
        if not remove_quietly(segments.fs, following.path):
            raise StorageError(f"cannot remove the leftover {following.path}")
        try:
            following.append(_rows_between(batches, segments.schema, start, stop), self._clock())
            following.sync()
        except BaseException:
            following.close()
            remove_quietly(segments.fs, following.path)
            raise
        return _Carried(following, stop)

    def _carried(self, job: _SealJob) -> tuple[ActiveSegment, int]:
        """The next WAL and the active WAL's rows it holds: the sealer thread's (waited for),
        or an empty one when there is none or writing it failed (logged; not an fsync's)."""
        if job.carry is not None:
            try:
                carried = job.carry.result()
                return carried.segment, carried.end
            except FsyncError:
                raise
            except (OSError, StorageError) as exc:
                log.warning("writing the WAL after %s's seal failed on the sealer thread (%s); "
                            "carrying its rows now", self._segments.active.path, exc)
        return self._segments.new_active(self._segments.active.base_seq + job.rows), job.rows

    def _remove_later(self, path: Path) -> None:
        """Delete a WAL the manifest no longer lists on the sealer thread, not the writer's: a
        full WAL (~100 MB) took 27 ms to unlink, and every request waiting for the next append
        waited as long. A crash first leaves a file no manifest lists, which the next open
        deletes (`storage.recovery`); `stop` waits for it."""
        assert self._executor is not None  # the seal being published was written on it
        self._executor.submit(remove_quietly, self._segments.fs, path)

    def publish_finished(self) -> list[SegmentInfo]:
        """List a seal the sealer has finished. If it failed, seal again now: a second failure
        refuses the change that found it (the WAL stays the source, as for a synchronous seal)."""
        try:
            return self.finish(wait=False)
        except (FsyncError, LogFailedError):
            raise
        except (OSError, StorageError) as exc:
            log.warning("sealing %s failed on the sealer thread (%s); retrying it now",
                        self._segments.active.path, exc)
            return self.seal(carry=True)

    def seal_after_append(self, *, background: bool) -> list[SegmentInfo]:
        """Seal a full segment whose rows are already written: in the background (a running
        seal is waited for only when another full segment is ready), or at once. A failure
        other than an fsync's is logged, not raised (the WAL stays the source, a later change
        retries)."""
        sealed: list[SegmentInfo] = []
        try:
            if self._job is not None:
                events, size = self._unsealed()
                if (events < self._settings.segment_events_max
                        and size < self._settings.segment_bytes_max):
                    return sealed
                sealed += self.finish(wait=True)
            if self.full():
                if background:
                    self._start(carry=True)
                else:
                    sealed += self.seal(carry=True)
        except (FsyncError, LogFailedError):
            raise
        except (OSError, StorageError) as exc:
            log.warning("sealing %s failed after its rows were written (%s); the next append "
                        "retries it", self._segments.active.path, exc)
        return sealed

    # ----------------------------------------------------------------------------- ending

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the sealer thread has no write running (True), without listing what it
        wrote: the next change does, or reports its error. False on timeout."""
        job = self._job
        for future in (job.future, job.carry) if job is not None else ():
            if future is None:
                continue
            try:
                future.exception(timeout)
            except TimeoutError:
                return False
        return True

    def publish_before_close(self) -> None:
        """List a running seal (a failure is logged: the WAL is the source, the open reseals)."""
        try:
            self.finish(wait=True)
        except (FsyncError, LogFailedError):
            raise
        except (OSError, StorageError) as exc:
            log.warning("sealing %s failed at close (%s); the next open seals it",
                        self._segments.active.path, exc)

    def stop(self) -> None:
        """Wait for the sealer thread to end (what it wrote unlisted, the next open deletes)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        job, self._job = self._job, None
        if job is not None and job.carry is not None and job.carry.exception() is None:
            job.carry.result().segment.close()  # an unlisted WAL: the next open deletes it
