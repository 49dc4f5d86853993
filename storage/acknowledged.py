"""What proves that a damaged WAL frame was acknowledged, so that it is corruption to refuse, never a
torn tail to cut.

A crash tears at most the last write, and that write was never acknowledged. A damaged frame is
known to have been acknowledged when an intact frame follows it (`frames.decode_frames` finds
those), or, under durability "always" (an append is acknowledged only after its fsync, and
nothing derived is written before it), when something written after the append holds its seqs:
a checkpoint the manifest lists, or the caller's witness (the ledger's view and the log position
it records). Under "batch" or "none" an acknowledged but unsynced tail may be lost in a power
cut: that is the setting's documented risk, so only later frames prove anything there.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec


class Witness(msgspec.Struct, frozen=True):
    """The caller's evidence that every event before `end_seq` was acknowledged; `name` says
    what holds it (a projection's file, say)."""

    end_seq: int
    name: str


def acknowledged_by(
    first_seq: int, checkpoints: Sequence[int], durability: str, witness: Witness | None,
) -> str | None:
    """Why the event at `first_seq` must have been acknowledged, or None if nothing says so."""
    if durability != "always":
        return None
    beyond = [seq for seq in checkpoints if seq > first_seq]
    if beyond:
        return f"the checkpoint at seq {max(beyond)} holds seq {first_seq}"
    if witness is not None and witness.end_seq > first_seq:
        return f"{witness.name}, at seq {witness.end_seq}, holds seq {first_seq}"
    return None
