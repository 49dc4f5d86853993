"""`python -m bench.baselines [-n N] [--seed S] [--repeat R] [--only NAME ...]`: JSON figures."""

from __future__ import annotations

import argparse
import json
import sys

from bench.baselines import BASELINES, run_all


def main(argv: list[str] | None = None) -> int:
    """Run the baselines on the pinned workload and print their figures as JSON."""
    ap = argparse.ArgumentParser(prog="python -m bench.baselines", description=main.__doc__)
    ap.add_argument("-n", "--n-commands", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", nargs="*", choices=BASELINES)
    ns = ap.parse_args(argv)
    figures = run_all(ns.n_commands, ns.seed, ns.repeat, tuple(ns.only) if ns.only else None)
    json.dump(figures, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
