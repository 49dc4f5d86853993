"""`FailureLatch`: once an fsync fails the log refuses changes until it is reopened.

After a failed fsync the kernel may have dropped the dirty pages, so a retried fsync could report
success over lost data (the PostgreSQL fsync lesson); only reopening, which recovers from what is
on disk, is safe. Every step that fsyncs runs inside `failing_on_fsync` of the log's one latch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from storage.errors import FsyncError, LogFailedError

log = logging.getLogger(__name__)


class FailureLatch:
    """Holds the first `LogFailedError` of a log; `error` stays set for the life of the object."""

    def __init__(self) -> None:
        self.error: LogFailedError | None = None

    @contextmanager
    def failing_on_fsync(self) -> Iterator[None]:
        """Turn an `FsyncError` (or a `LogFailedError`) raised inside into the latched failure."""
        try:
            yield
        except FsyncError as exc:
            self.error = LogFailedError(exc)
            log.error("%s", self.error)
            raise self.error from exc
        except LogFailedError as exc:
            self.error = exc
            raise
