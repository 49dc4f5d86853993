"""The end-to-end demo: RocketMQ's backtracking story (consume, outage, reset to before it,
consume again), typed as CLI commands into a fresh data directory and narrated.

The face that runs it passes `invoke` (run one command line of the CLI in-process, return its
exit code), so this module knows the story and nothing of the CLI's library.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ledger.errors import LedgerError
from ledger.timeparse import iso

DEMO_SPARK_ENV = "OFFSET_LEDGER_DEMO_SPARK"
DEMO_TOPIC, DEMO_GROUP, DEMO_QUEUES, DEMO_MINUTES, DEMO_PER_MINUTE = "orders", "billing", 4, 100, 25
DEMO_OUTAGE = (60, 75)  # minutes after the story starts
EXIT_REFUSED = 1
Invoke = Callable[[Sequence[str]], int]


#: The other groups on the topic, for the console's groups page: `shipping` stops committing
#: at this minute (STOP), `analytics` takes this many messages a minute of the 25 (WARN).
DEMO_SHIPPING_STOPS, DEMO_ANALYTICS_PER_MINUTE = 60, 20


def demo_start(now_ms: int) -> int:
    """When the demo's day starts: on a minute, so that it ends just before `now_ms`."""
    return (now_ms - (DEMO_MINUTES + 2) * 60_000) // 60_000 * 60_000


def demo_commands(start_ms: int) -> list[dict[str, Any]]:
    """The first 100 minutes: producers append 25 messages a minute to each of 4 queues;
    `billing` pulls and commits them 30 s later; `shipping` commits a minute behind until it
    stops; `analytics` falls behind a little more every minute. Each line's `ts` is its ledger
    time (injected clock)."""
    lines: list[dict[str, Any]] = [
        {"op": "group_set", "group": g, "initial": "earliest", "ts": start_ms - 60_000}
        for g in (DEMO_GROUP, "shipping", "analytics")]
    for m in range(DEMO_MINUTES):
        ts = start_ms + m * 60_000
        for q in range(DEMO_QUEUES):
            lines.append({"op": "queue_append", "topic": DEMO_TOPIC, "queue_id": q,
                          "count": DEMO_PER_MINUTE, "store_time": ts, "ts": ts})
        for q in range(DEMO_QUEUES):
            done = {DEMO_GROUP: (m + 1) * DEMO_PER_MINUTE,
                    "analytics": (m + 1) * DEMO_ANALYTICS_PER_MINUTE}
            if 0 < m <= DEMO_SHIPPING_STOPS:
                done["shipping"] = m * DEMO_PER_MINUTE
            for group, offset in done.items():
                client = f"{group}-{q % 2 + 1}"
                lines.append({"op": "pull", "group": group, "topic": DEMO_TOPIC, "queue_id": q,
                              "client": client, "max": 32, "ts": ts + 30_000})
                lines.append({"op": "commit", "group": group, "topic": DEMO_TOPIC,
                              "queue_id": q, "client": client, "offset": offset,
                              "ts": ts + 31_000})
    return lines


def reconsume_commands(from_offset: int, to_offset: int, step: int) -> list[dict[str, Any]]:
    """The group reading again from the reset target (ledger time: the wall clock)."""
    lines: list[dict[str, Any]] = []
    for done in range(from_offset + step, to_offset + 1, step):
        for q in range(DEMO_QUEUES):
            client = f"billing-{q % 2 + 1}"
            lines.append({"op": "pull", "group": DEMO_GROUP, "topic": DEMO_TOPIC, "queue_id": q,
                          "client": client, "max": step})
            lines.append({"op": "commit", "group": DEMO_GROUP, "topic": DEMO_TOPIC,
                          "queue_id": q, "client": client, "offset": done})
    return lines


class DemoSession:
    """Types commands into the CLI in a temporary data dir and narrates them (rich)."""

    def __init__(self, root: Path, console: Any, stdout: Any, invoke: Invoke,
                 prog: str) -> None:
        self.root = root
        self.data = root / "data"
        self.console = console
        self.stdout = stdout
        self.invoke = invoke
        self.prog = prog

    def say(self, text: str) -> None:
        self.console.print()
        self.console.print(f"# {text}", style="italic cyan", highlight=False)

    def run(self, args: Sequence[str], *, redirect: str | None = None, expect: int = 0) -> int:
        shown = shlex.join(args) + (f" > {redirect}" if redirect else "")
        self.console.print(f"$ {self.prog} {shown}", style="bold", highlight=False, markup=False)
        target = (self.root / redirect).open("w") if redirect else self.stdout
        try:
            with contextlib.redirect_stdout(target):
                code = self.invoke(["--data-dir", str(self.data), *args])
        finally:
            if redirect:
                target.close()
        if code != expect:
            raise LedgerError(f"demo step failed with exit {code}: {self.prog} {shown}")
        if code:
            self.console.print(f"(exit {code})", style="dim", highlight=False)
        return code

    def write_ndjson(self, name: str, lines: Iterable[dict[str, Any]]) -> None:
        with (self.root / name).open("w") as f:
            for line in lines:
                f.write(json.dumps(line, separators=(",", ":")) + "\n")


def run_demo(root: Path, console: Any, stdout: Any, invoke: Invoke, *, spark: bool,
             data_dir_env: str, prog: str) -> dict[str, Any]:
    """The story in `root` (its files typed as relative paths); returns a summary."""
    s = DemoSession(root, console, stdout, invoke, prog)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        return _story(s, spark, data_dir_env)
    finally:
        os.chdir(cwd)


def _story(s: DemoSession, spark: bool, data_dir_env: str) -> dict[str, Any]:
    console = s.console
    now = int(time.time() * 1000)
    start = demo_start(now)
    outage_from = start + DEMO_OUTAGE[0] * 60_000
    outage_to = start + DEMO_OUTAGE[1] * 60_000
    total = DEMO_QUEUES * DEMO_MINUTES * DEMO_PER_MINUTE
    console.print(f"offset-ledger demo in {s.root}  (export {data_dir_env}={s.data})",
                  style="bold magenta", highlight=False, markup=False)

    s.say(f"{iso(start)}: producers write {total:,} messages to topic {DEMO_TOPIC!r} "
          f"({DEMO_QUEUES} queues, {DEMO_PER_MINUTE}/min each) over {DEMO_MINUTES} minutes; "
          f"group {DEMO_GROUP!r} consumes as they arrive ('shipping' stops after an hour, "
          "'analytics' falls behind). The ledger records every append, pull and commit (each "
          "line carries its own time).")
    s.write_ndjson("day.ndjson", demo_commands(start))
    s.run(["init", "--segment-events", "500"])
    s.run(["apply", "day.ndjson"], redirect="day.out")
    s.run(["progress", "--group", DEMO_GROUP])

    s.say(f"Incident: from {iso(outage_from)} to {iso(outage_to)} the billing database was "
          "down, yet the consumers acknowledged every message. Which offsets were stored at "
          "the start of the outage?")
    s.run(["lookup", "--topic", DEMO_TOPIC, "--datetime", iso(outage_from) or ""])
    s.say("Plan a reset of the group to the first message stored at or after the outage "
          "(a dry run: nothing changes).")
    reset_args = ["reset", "--group", DEMO_GROUP, "--topic", DEMO_TOPIC,
                  "--to-datetime", iso(outage_from) or ""]
    s.run(reset_args)
    s.run([*reset_args, "--execute", "--actor", "alice",
           "--reason", "INC-4711 replay the billing outage"])

    s.say("A consumer still running from before the reset tries to commit under its old "
          "generation: fenced, so the reset cannot be lost to a racing commit.")
    s.run(["commit", "--group", DEMO_GROUP, "--topic", DEMO_TOPIC, "--queue", "0",
           "--offset", str(DEMO_MINUTES * DEMO_PER_MINUTE), "--client", "billing-1",
           "--generation", "0"], expect=EXIT_REFUSED)

    s.say("The group consumes again from the reset offsets (generation 1).")
    reset_to = DEMO_OUTAGE[0] * DEMO_PER_MINUTE
    s.write_ndjson("replay.ndjson",
                   reconsume_commands(reset_to, DEMO_MINUTES * DEMO_PER_MINUTE, 250))
    s.run(["apply", "replay.ndjson"], redirect="replay.out")
    s.run(["progress", "--group", DEMO_GROUP])

    s.say("Auditors: who moved which offset, when, from what to what, and why.")
    s.run(["history", "--group", DEMO_GROUP, "--kind", "reset"])
    s.say("Analysts: lag and re-delivered messages in SQL.")
    s.run(["sql", "SELECT consumer_group, topic, sum(lag) AS lag, sum(inflight) AS inflight, "
                  "max(generation) AS generation FROM progress GROUP BY ALL"])
    s.run(["sql", "SELECT kind, count(*) AS events FROM events "
                  f"WHERE consumer_group = '{DEMO_GROUP}' GROUP BY kind ORDER BY kind"])
    spark_done = _spark(s, spark)
    s.say("Done.")
    return {"data_dir": str(s.data), "messages": total, "messages_replayed":
            DEMO_QUEUES * (DEMO_MINUTES * DEMO_PER_MINUTE - reset_to), "spark": spark_done}


def _spark(s: DemoSession, enabled: bool) -> str:
    """Spark compaction and audit, when enabled and Java is there (else a note)."""
    if not enabled:
        s.say(f"Spark compaction and audit skipped ({DEMO_SPARK_ENV}=0).")
        return "skipped"
    if shutil.which("java") is None:
        s.say("Spark compaction and audit skipped: java is not on PATH.")
        return "skipped"
    s.say("Spark compacts the small sealed segments and audits the view against a replay.")
    s.run(["compact"])
    s.run(["audit"])
    return "done"
