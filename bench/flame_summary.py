"""Text summary of a py-spy flame profile (`py-spy record -f raw`, folded stacks): the top frames
by self time and by total time, each as a share of all samples.

    python -m bench.flame_summary PROFILE.txt [--top 25] > bench/results/profile-NAME.md
"""
from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r" \((?P<path>[^()]*?)(?::\d+)?\)$")


def _frame(raw: str) -> str:
    """`func (path/to/module.py:123)` as `func (module.py)`: lines merged so a function counts
    once."""
    m = _LINE.search(raw)
    if not m:
        return raw.strip()
    return f"{raw[:m.start()].strip()} ({Path(m.group('path')).name})"


def summarize(text: str, top: int = 25) -> str:
    """The markdown tables: top `top` frames by self samples and by total samples."""
    self_c: Counter[str] = Counter()
    total_c: Counter[str] = Counter()
    n = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        n += k
        frames = [_frame(f) for f in stack.split(";") if f]
        if not frames:
            continue
        self_c[frames[-1]] += k
        for f in set(frames):
            total_c[f] += k
    out = [f"{n} samples", "", "| self % | frame |", "|---:|---|"]
    out += [f"| {100 * c / n:.1f} | {f} |" for f, c in self_c.most_common(top)]
    out += ["", "| total % | frame |", "|---:|---|"]
    out += [f"| {100 * c / n:.1f} | {f} |" for f, c in total_c.most_common(top)]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    print(summarize(a.profile.read_text(), a.top), end="")


if __name__ == "__main__":
    main()
