"""Helpers of the reliability suite: a faulty file layer for a Ledger, a small valid history,
the one-line error contract of the CLI, and "the view equals a replay of the log"."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from typer.testing import CliRunner, Result

from cli import app
from ledger import Ledger
from storage import OsFileSystem
from storage.fs import Buffer, FileHandle
from tests.tools.crash_harness import replayed_view, view_rows

T, G = "orders", "billing"

FAULTS: dict[str, Callable[[], OSError]] = {
    "enospc": lambda: OSError(errno.ENOSPC, "No space left on device (injected)"),
    "eio": lambda: OSError(errno.EIO, "Input/output error (injected)"),
}


class FaultyHandle:
    def __init__(self, fs: FaultFS, inner: FileHandle, path: Path) -> None:
        self.fs, self.inner, self.path = fs, inner, path

    def write(self, data: Buffer) -> int:
        view = memoryview(data).cast("B")
        if self.fs.write_fault is not None and self.fs.matches(self.path):
            if self.fs.write_fault == "enospc" and len(view) > 1:
                self.inner.write(view[: len(view) // 2])  # the disk fills up half way
            raise FAULTS[self.fs.write_fault]()
        if self.fs.short_writes and len(view) > 1:
            return self.inner.write(view[: max(1, len(view) // 3)])
        return self.inner.write(view)

    def fsync(self) -> None:
        if self.fs.fsync_fault and self.fs.matches(self.path):
            raise OSError(errno.EIO, f"Input/output error (injected fsync of {self.path.name})")
        self.inner.fsync()

    def truncate(self, size: int) -> None:
        self.inner.truncate(size)

    def close(self) -> None:
        self.inner.close()


class FaultFS(OsFileSystem):
    """The OS file layer with switchable faults, for `Ledger.open(..., fs=FaultFS())`.

    `write_fault` ("enospc": writes half then fails; "eio": fails), `fsync_fault`,
    `rename_fault`, `short_writes` (every write writes a third); `only` limits faults to paths
    whose name ends with it (".wal", ".parquet.tmp", ...).
    """

    def __init__(self) -> None:
        self.write_fault: str | None = None
        self.fsync_fault = False
        self.rename_fault = False
        self.short_writes = False
        self.only: str | None = None

    def clear(self) -> None:
        self.write_fault, self.fsync_fault, self.rename_fault = None, False, False
        self.short_writes, self.only = False, None

    def matches(self, path: Path) -> bool:
        return self.only is None or Path(path).name.endswith(self.only)

    def open_append(self, path: Path) -> FileHandle:
        return FaultyHandle(self, super().open_append(path), path)

    def open_write(self, path: Path) -> FileHandle:
        return FaultyHandle(self, super().open_write(path), path)

    def rename(self, src: Path, dst: Path) -> None:
        if self.rename_fault and self.matches(src):
            raise OSError(errno.EIO, f"Input/output error (injected rename of {Path(src).name})")
        super().rename(src, dst)

    def fsync_file(self, path: Path) -> None:
        if self.fsync_fault and self.matches(path):
            raise OSError(errno.EIO, "Input/output error (injected)")
        super().fsync_file(path)

    def fsync_dir(self, path: Path) -> None:
        if self.fsync_fault and self.only is None:
            raise OSError(errno.EIO, "Input/output error (injected)")
        super().fsync_dir(path)


def build_history(led: Ledger, queues: int = 2, rounds: int = 3) -> list[int]:
    """A small valid history (appends, a group, pulls, commits); returns the acknowledged seqs."""
    seqs = []
    led.group_set(G, initial="earliest")
    for q in range(queues):
        led.queue_append(T, q, 100, store_ts=1_000_000)
        seqs.append(led.log.next_seq - 1)
    for r in range(rounds):
        for q in range(queues):
            led.pull(G, T, q, client="c1", max_count=10)
            assert led.commit(G, T, q, 10 * (r + 1), client="c1").accepted
            seqs.append(led.log.next_seq - 1)
    return seqs


def assert_view_is_a_replay(root: Path) -> pa.Table:
    """Reopen as the writer; the DuckDB view equals a fold of the whole log. Returns the log."""
    with Ledger.open(root) as led:
        events = led.log.read()
        assert view_rows(led.view.con) == replayed_view(events)
        assert events.column("seq").to_pylist() == list(range(events.num_rows))
    return events


class Cli:
    """`offset-ledger --data-dir DIR ...` in-process, stdout and stderr apart."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.runner = CliRunner()

    def __call__(self, *args: Any, input: str | bytes | None = None) -> Result:
        return self.runner.invoke(app, ["--data-dir", str(self.data), *map(str, args)],
                                  input=input)


def assert_one_line_error(r: Result, code: int, *fragments: str) -> str:
    """Exit `code`, exactly one line on stderr, no traceback anywhere; returns the line."""
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr, r.exception)
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("Error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]
