"""The console's groups page over the 10M-event bench ledger (200 groups x 10 topics x 8 queues,
DESIGN.md "Performance notes"): how long until Chromium has rendered it, and what its API
calls cost. Target: under 1 s (issue 17).

Build, once (cached under bench/data/): the pinned workload (`bench.workload`, seed 7) applied
with `Ledger.apply_arrow` at the commands' own times. Then a real `offset-ledger serve` over
it, and headless Chromium (Debian's, driven by Playwright) loads `/` once to warm up and then
`--loads` times in a fresh tab each. Per load, from the browser's own clocks: navigation
start to the page's `ol-ready` mark (the scripts loaded, /v1/whoami, then /v1/lag and
/v1/groups answered, the table in the DOM), to `ol-sparks` (the sparklines of the rows in view
drawn), and each API call's duration from resource timing (request sent to answer read).

    python -m bench.console_bench [--commands N] [--loads K] [--out DIR]

writes DIR/console-latest.json and .md (default bench/results/).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench import workload
from bench.browser import CHROMIUM, launch_chromium, wait_listening

RESULTS_DIR = Path(__file__).with_name("results")
API_CALLS = ("/v1/whoami", "/v1/lag", "/v1/groups")
TARGET_MS = 1000.0


def build_ledger(n_commands: int) -> Path:
    """The workload's ledger, applied once and kept under bench/data/ (like its command file)."""
    from bench.phases import FixedClock, arrow_chunks, chunk_bounds
    from ledger import Ledger

    path = workload.ensure_file(n_commands)
    root = workload.DATA_DIR / f"console-{workload.file_stem(n_commands)}"
    if (root / "log").exists():
        return root
    tmp = root.with_name(root.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    led = Ledger.open(tmp, backfill=True, clock=FixedClock(), durability="none", segment_events_max=1_000_000)
    for _lo, _hi, commands in arrow_chunks(path, chunk_bounds(n_commands, 1_000_000, [])):
        led.apply_arrow(commands)
    led.close()
    tmp.rename(root)
    return root


LOAD_TIMES = """() => {
  const at = (name) => performance.getEntriesByName(name)[0]?.startTime ?? null;
  const calls = {};
  for (const r of performance.getEntriesByType('resource')) {
    const path = new URL(r.name).pathname;
    if (path.startsWith('/v1/')) calls[path] = r.responseEnd - r.requestStart;
  }
  return {ready_ms: at('ol-ready'), sparks_ms: at('ol-sparks'), calls,
          rows: document.querySelectorAll('#groups tbody tr').length};
}"""


def measure(url: str, loads: int) -> list[dict]:
    """`loads` timed loads of the groups page (after one warm-up), each in a fresh tab."""
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        context = launch_chromium(p, Path(profile))
        try:
            for i in range(loads + 1):
                page = context.new_page()
                page.goto(url + "/")
                page.wait_for_selector("body[data-ready='1']", timeout=120_000)
                page.wait_for_selector("#groups tr .spark canvas", timeout=120_000)
                page.wait_for_timeout(200)  # the first observer batch of sparklines
                times = page.evaluate(LOAD_TIMES)
                page.close()
                if i:
                    out.append(times)
        finally:
            context.close()
    return out


def _spread(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def summarize(loads: list[dict]) -> dict:
    figures = {"ready_ms": _spread([x["ready_ms"] for x in loads]),
               "sparks_ms": _spread([x["sparks_ms"] for x in loads])}
    for call in API_CALLS:
        figures[call] = _spread([x["calls"][call] for x in loads])
    return figures


def markdown(result: dict) -> str:
    f = result["figures"]

    def row(name: str, spread: dict) -> str:
        return (f"| {name} | {spread['min']:.0f} | **{spread['median']:.0f}** | "
                f"{spread['max']:.0f} |")

    verdict = "pass" if f["ready_ms"]["median"] < TARGET_MS else "FAIL"
    return "\n".join([
        "# The console's groups page over the 10M-event ledger",
        "",
        f"Run {result['when']}; {result['events']:,} events, {result['groups']} groups rendered "
        f"({result['commands']:,} commands of the pinned workload, seed 7); Chromium "
        f"{result['chromium']}; {result['loads']} loads after a warm-up; load average at start "
        f"{result['load_average'][0]:.2f} (shared 2-core machine).",
        "",
        f"Target: rendered in under {TARGET_MS:.0f} ms: **{verdict}** "
        f"(median {f['ready_ms']['median']:.0f} ms).",
        "",
        "| measure (ms) | min | median | max |",
        "|---|---|---|---|",
        row("navigation start to rendered (`ol-ready`: API answers in, table in the DOM)",
            f["ready_ms"]),
        row("navigation start to the sparklines in view drawn (`ol-sparks`)", f["sparks_ms"]),
        *(row(f"`GET {call}` (browser resource timing)", f[call]) for call in API_CALLS),
        "",
        "How measured: `python -m bench.console_bench` (its docstring says the steps); the API "
        "calls are timed by the browser from request sent to answer read, the page marks by "
        "`performance.mark` in server/console/api.js and groups.js.",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.console_bench",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--commands", type=int, default=10_000_000)
    ap.add_argument("--loads", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    ns = ap.parse_args(argv)
    t = time.perf_counter()
    root = build_ledger(ns.commands)
    print(f"ledger {root} ready in {time.perf_counter() - t:.0f} s", flush=True)
    from ledger import Ledger

    with Ledger.open(root, readonly=True) as led:
        events, groups = led.log.next_seq, len(led.groups())
    load_average = os.getloadavg()
    from tests.server.conftest import Server  # the tests' serve process: the same real server

    server = Server(root)
    try:
        wait_listening(server.url, 120)
        loads = measure(server.url, ns.loads)
    finally:
        server.stop()
    chromium = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout
    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commands": ns.commands,
              "events": events, "groups": loads[0]["rows"], "ledger_groups": groups,
              "loads": ns.loads, "load_average": load_average,
              "chromium": chromium.strip().split(" built")[0], "figures": summarize(loads),
              "samples": loads}
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / "console-latest.json").write_text(json.dumps(result, indent=1))
    (ns.out / "console-latest.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
