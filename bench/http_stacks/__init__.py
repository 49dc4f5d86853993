"""Candidate HTTP stacks for `offset-ledger serve`, each a minimal app with the same two routes.

Why: the server's per-request CPU cost is paid in one Python process (one writer per data
directory), so the stack is chosen by measuring the same group-commit app on each of them
(`python -m bench.http_stacks.run`; figures in RESULTS.md beside this file).
"""
