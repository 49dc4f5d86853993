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
