"""Keys the column-wise fold keeps as columns between runs (see `Resident`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ledger.fold.position import NULL, Position, rows_of
from ledger.fold.state import State
from ledger.limits import QUEUE_ID_MAX


class Resident:
    """Positions of the keys that earlier runs of one apply call folded column-wise, kept as
    columns: a run reads them instead of each key's Position, and they are written back to the
    Positions only when something else is about to read those (a checkpoint or view flush, the
    per-command path on the key, a barrier, the caller, the end of the call).

    Exact because nothing else changes a resident key's position: a line on it that the vector
    path does not fold first evicts the key (writing it back), and anything that may touch many
    keys (a barrier, a run folded per command, new dictionaries) writes back and empties all.
    Keys are ids over the call's unified dictionaries: (group code, topic code, queue id)."""

    COLUMNS = ("committed", "pulled", "generation", "last_client", "last_pull_ts", "last_active")

    #: The name columns whose codes make the ids and the client codes.
    NAMED = ("group", "topic", "client")

    def __init__(self, state: State) -> None:
        self.state = state
        self.dictionaries: tuple[list[Any], list[Any], list[Any]] | None = None
        # codes over every table of a call that passes its tables through `encode` (many
        # NDJSON blocks): a key stays resident from one table to the next
        self._codes: dict[str, dict[Any, int]] = {name: {} for name in self.NAMED}
        self._held: tuple[int, int] | None = None  # (state, events applied) at `hold`
        self._empty()

    def _empty(self) -> None:
        self._coded: list[Any] = []  # clients whose state table codes `_codes_of` holds
        self._codes_of = np.zeros(0, np.int64)
        self.ids = np.zeros(0, np.int64)
        self.columns = {name: np.zeros(0, np.int64) for name in self.COLUMNS}
        self.dirty = np.zeros(0, bool)
        # per resident (in id order): its slot in `rows` (its row of the state's table), which
        # only grows (a run's new keys are appended, not merged into order: no Python pass per
        # run)
        self.slot = np.zeros(0, np.int64)
        self.rows = np.zeros(0, np.int64)
        self.pulled_by: list[tuple[np.ndarray, np.ndarray]] = []  # (key ids, client codes)

    def __len__(self) -> int:
        return len(self.ids)

    def use(self, groups: list[Any], topics: list[Any], clients: list[Any]) -> None:
        """The run's dictionaries; ids and client codes kept under others are written back.
        Dictionaries that only grew (`encode`) keep every code: ids are renumbered to the new
        number of topics, in the same order."""
        new = (groups, topics, clients)
        old = self.dictionaries
        if old is not None and old != new:
            if all(len(b) >= len(a) and b[:len(a)] == a for a, b in zip(old, new, strict=True)):
                self._renumber(max(len(old[1]), 1), max(len(topics), 1))
            else:
                self.clear()
        self.dictionaries = new

    def _renumber(self, before: int, after: int) -> None:
        """Ids made with `before` topics as made with `after` (>= before): (group, topic,
        queue) order is unchanged, so the ids stay sorted."""
        if before == after:
            return
        span = QUEUE_ID_MAX + 1

        def renumbered(ids: np.ndarray) -> np.ndarray:
            pair = ids // span
            return ((pair // before) * after + pair % before) * span + ids % span

        self.ids = renumbered(self.ids)
        self.pulled_by = [(renumbered(k), c) for k, c in self.pulled_by]

    def encode(self, table: pa.Table) -> pa.Table:
        """The table's name columns (dictionary-encoded, one chunk: `_unified`) recoded over
        the codes of every table encoded before, so that one call's tables share ids."""
        for name in self.NAMED:
            if name not in table.column_names:
                continue
            col = table.column(name)
            if not pa.types.is_dictionary(col.type) or col.num_chunks != 1:
                continue
            arr = col.chunk(0)
            codes = self._codes[name]
            mapping = []
            for v in arr.dictionary.to_pylist():
                code = codes.get(v)
                if code is None:
                    code = codes[v] = len(codes)
                mapping.append(code)
            indices = pa.array(mapping, pa.int32()).take(arr.indices)
            recoded = pa.DictionaryArray.from_arrays(
                indices, pa.array(list(codes), arr.dictionary.type))
            table = table.set_column(table.column_names.index(name), name, recoded)
        return table

    def hold(self) -> None:
        """Between tables of one call: every Position written back (the caller may read
        them), the residents kept for the next table."""
        self.write_back()
        self._held = (id(self.state), self.state.events_applied)

    def resume(self, state: State) -> None:
        """Before the next table: residents are dropped if anything else folded since
        `hold` (their columns may no longer be the Positions)."""
        if self._held != (id(state), state.events_applied):
            self.state = state
            self._empty()
        self._held = None

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Index of each id among the residents, -1 when not resident."""
        if not len(self.ids):
            return np.full(len(ids), -1, np.int64)
        at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        return np.where(self.ids[at] == ids, at, -1)

    def write_back(self, index: np.ndarray | None = None) -> None:
        """Set the Positions of dirty residents (all, or those at `index`): a scatter into
        their table's columns per field."""
        dirty = np.nonzero(self.dirty)[0] if index is None else index[self.dirty[index]]
        if not len(dirty) and not self.pulled_by:
            return
        clients = self.dictionaries[2] if self.dictionaries is not None else []
        c = self.columns
        table = self.state.table
        slots = self.slot[dirty]
        rows = self.rows[slots]
        table.committed[rows] = c["committed"][dirty]
        table.last_pull_ts[rows] = c["last_pull_ts"][dirty]
        # a key never pulled keeps its null pulled offset (-1 in the columns)
        pulled = c["pulled"][dirty]
        table.pulled[rows] = np.where(pulled >= 0, pulled, NULL)
        active = c["last_active"][dirty]
        table.last_active_ts[rows] = active
        table.last_update_ts[rows] = active
        last_client = c["last_client"][dirty]
        named = last_client >= 0
        if named.any():
            table.last_client[rows[named]] = self._table_codes(clients)[last_client[named]]
        self.state.dirty_rows.update(rows.tolist())
        self.dirty[dirty] = False
        # every client that pulled a key holds the key's generation
        if self.pulled_by:
            ids = np.concatenate([k for k, _ in self.pulled_by])
            codes = np.concatenate([c for _, c in self.pulled_by])
            keep = np.ones(len(ids), bool) if index is None else np.isin(ids, self.ids[index])
            span = len(clients) + 1
            pairs = np.unique(self.rows[self.slot[self.lookup(ids[keep])]] * span + codes[keep])
            pulled, codes_of = pairs // span, pairs % span
            # dict.__setitem__ over the pairs in one C loop: each row's dict, client, generation
            names = np.asarray(clients, object)[codes_of] if len(clients) else []
            list(map(dict.__setitem__, table.generations[pulled].tolist(),
                     list(names), table.generation[pulled].tolist()))
            self.pulled_by = [] if index is None else [(ids[~keep], codes[~keep])]

    def _table_codes(self, clients: list[Any]) -> np.ndarray:
        """The table's code of each client of the call's dictionary: kept, and extended as the
        dictionary grows (a call's dictionaries only grow)."""
        known = len(self._coded)
        if len(clients) < known or clients[:known] != self._coded:
            self._coded, self._codes_of, known = [], np.zeros(0, np.int64), 0
        if len(clients) > known:
            more = self.state.table.client_codes(clients[known:])
            self._codes_of = np.concatenate((self._codes_of, more))
            self._coded = list(clients)
        return self._codes_of

    def evict(self, ids: np.ndarray) -> None:
        """Write back and forget these keys (the per-command path is about to fold them)."""
        index = self.lookup(np.unique(ids))
        index = index[index >= 0]
        if not len(index):
            return
        self.write_back(index)
        keep = np.ones(len(self.ids), bool)
        keep[index] = False
        self._select(keep)

    def evict_group(self, group: object) -> None:
        """Write back and forget a group's keys (a barrier command on the group follows)."""
        if self.dictionaries is None or not len(self.ids):
            return
        try:
            code = self.dictionaries[0].index(group)
        except ValueError:
            return  # no key of that group is resident
        n_topics = max(len(self.dictionaries[1]), 1)
        self.evict(self.ids[self.ids // (QUEUE_ID_MAX + 1) // n_topics == code])

    def clear(self) -> None:
        self.write_back()
        self._empty()

    def _select(self, keep: np.ndarray) -> None:
        self.ids = self.ids[keep]
        self.columns = {name: col[keep] for name, col in self.columns.items()}
        self.dirty = self.dirty[keep]
        self.slot = self.slot[keep]  # the slots of those dropped are no longer referenced

    def store(self, ids: np.ndarray, values: dict[str, np.ndarray], dirty: np.ndarray,
              new_positions: list[Position], new: np.ndarray) -> None:
        """Residents after a run: `ids` (sorted, unique) with their values; `new` marks those
        not resident before, whose Positions come in order in `new_positions`."""
        index = self.lookup(ids)
        old = index >= 0
        for name, col in self.columns.items():
            col[index[old]] = values[name][old]
        self.dirty[index[old]] |= dirty[old]
        if not new.any():
            return
        merged = np.concatenate((self.ids, ids[new]))
        order = np.argsort(merged, kind="stable")
        self.ids = merged[order]
        self.columns = {name: np.concatenate((col, values[name][new]))[order]
                        for name, col in self.columns.items()}
        self.dirty = np.concatenate((self.dirty, dirty[new]))[order]
        first = len(self.rows)
        self.slot = np.concatenate(
            (self.slot, np.arange(first, first + len(new_positions), dtype=np.int64)))[order]
        self.rows = np.concatenate((self.rows, rows_of(new_positions)))
