"""Imports point one way (DESIGN.md, Layout): between the top-level packages, and between the
rooms of `ledger/`, each of which may import only the rooms below it. Every import counts, also
those inside functions and under `if TYPE_CHECKING:`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The rooms of ledger/, bottom first: each may import only the rooms before it.
LEDGER_ROOMS = ("errors", "limits", "timeparse", "fold", "commands", "store", "reads", "lag",
                "importers", "reset", "executor", "demo", "ledger", "follow", "cluster")

#: Top-level packages and what each may import of the project (cli is lazy about server and
#: spark_compaction, but still one way).
PACKAGES = {
    "storage": set(),
    "ledger": {"storage"},
    "spark_compaction": {"ledger", "storage"},
    "server": {"ledger", "storage"},
}


def imported_modules(path: Path) -> set[str]:
    """Dotted names of every module an import in `path` names (absolute imports only: the
    project uses no relative ones)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def ledger_room(dotted: str) -> str | None:
    """The room of `ledger.<room>[...]`; None for the face (`ledger`) or another package."""
    parts = dotted.split(".")
    if parts[0] != "ledger" or len(parts) < 2 or parts[1] not in LEDGER_ROOMS:
        return None
    return parts[1]


def test_the_ledger_rooms_are_exactly_the_listed_ones() -> None:
    found = {p.stem if p.is_file() else p.name for p in (ROOT / "ledger").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert found == set(LEDGER_ROOMS)


@pytest.mark.parametrize("room", LEDGER_ROOMS)
def test_a_ledger_room_imports_only_rooms_below_it(room: str) -> None:
    below = set(LEDGER_ROOMS[:LEDGER_ROOMS.index(room)])
    base = ROOT / "ledger" / room
    files = sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
    wrong = []
    for path in files:
        for dotted in imported_modules(path):
            if dotted == "ledger" and path.name != "__init__.py":
                wrong.append(f"{path.relative_to(ROOT)} imports the face `ledger`")
            target = ledger_room(dotted)
            if target is not None and target != room and target not in below:
                wrong.append(f"{path.relative_to(ROOT)} imports {dotted} (room {target!r})")
            top = dotted.split(".")[0]
            if top in ("cli", "server", "spark_compaction", "pyspark"):
                wrong.append(f"{path.relative_to(ROOT)} imports {dotted}")
    assert not wrong, "\n".join(sorted(set(wrong)))


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_packages_import_one_way(package: str) -> None:
    others = {"cli", *PACKAGES} - {package} - PACKAGES[package]
    wrong = [f"{path.relative_to(ROOT)} imports {dotted}"
             for path in sorted((ROOT / package).rglob("*.py"))
             for dotted in imported_modules(path) if dotted.split(".")[0] in others]
    assert not wrong, "\n".join(sorted(set(wrong)))
