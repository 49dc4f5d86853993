"""Shared by the importer tests: fixture paths and the error-message check."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.errors import InvalidInput

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def refused(call, *args, **kwargs) -> str:  # noqa: ANN001 - any parser
    """The InvalidInput message a call raises (the test fails if it returns)."""
    with pytest.raises(InvalidInput) as caught:
        call(*args, **kwargs)
    return str(caught.value)


class Expect:
    """The command dicts a parser should give, for one source."""

    def __init__(self, source: str) -> None:
        self.source = source

    def bounds(self, topic: str, queue_id: int, max_offset: int) -> dict:
        return {"op": "queue_bounds", "topic": topic, "queue_id": queue_id,
                "max_offset": max_offset, "source": self.source}

    def sync(self, group: str, topic: str, queue_id: int, offset: int | None,
             ts: int | None = None) -> dict:
        cmd = {"op": "sync", "group": group, "topic": topic, "queue_id": queue_id,
               "offset": offset, "source": self.source}
        if ts is not None:
            cmd["ts"] = ts
        return cmd
