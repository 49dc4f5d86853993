"""The follower beside `serve`: the server owns the data directory; the follower sends its
batches (events and positions in one request) to `POST /v1/commands` with a `sync` token. A
`consume` token is refused; so is what a `sync` token may not send."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from tests.follow.conftest import Cluster, follow
from tests.server.conftest import Server, add_token


def test_the_follower_sends_to_serve_with_a_sync_token_and_a_consume_token_is_refused(
        cluster: Cluster, tmp_path: Path) -> None:
    data, tokens = tmp_path / "data", tmp_path / "tokens.toml"
    follower = add_token(tokens, "follower", "sync")
    worker = add_token(tokens, "worker", "consume")
    auditor = add_token(tokens, "auditor", "audit")
    t0 = int(time.time() * 1000) - 60_000
    cluster.commit("billing", "orders", 0, 40, t0)
    cluster.commit("billing", "orders", 0, 55, t0 + 5000)
    cluster.group_tombstone("gone")
    cluster.flush()
    (tmp_path / "follower.token").write_text(follower + "\n")
    (tmp_path / "worker.token").write_text(worker + "\n")
    server = Server(data, "--tokens", str(tokens))
    try:
        refused = follow(tmp_path / "unused", cluster, "--server", server.url,
                         "--token-file", str(tmp_path / "worker.token"))
        assert refused.returncode == 2, refused.stderr
        assert "token 'worker' has role(s) consume: following a cluster needs a token of role " \
               "sync" in refused.stderr
        assert "Traceback" not in refused.stderr

        done = follow(tmp_path / "unused", cluster, "--server", server.url,
                      "--token-file", str(tmp_path / "follower.token"))
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert (summary["commits"], summary["errors"]) == (2, 0)
        with server.client(auditor) as c:
            history = c.history(group="billing")
            assert [(e["kind"], e["offset"], e["actor"]) for e in history] == [
                ("sync", 40, "follower"), ("sync", 55, "follower")]
            own = c.progress("offset-ledger.follow.mock")
            assert sum(r["committed_offset"] for r in own) == 3
            # what a sync token may not send is refused per command
            with server.client(follower) as f:
                [r] = f.commands([{"op": "commit", "group": "billing", "topic": "orders",
                                   "queue_id": 0, "offset": 56}])
                assert r["refused"] == "role"
                [r] = f.commands([{"op": "group_delete", "group": "billing"}])
                assert r["refused"] == "role"
            # the follower's own lag is a group's: the server's metrics export it
            metrics = c.request("GET", "/metrics").decode()
            lags = [line for line in metrics.splitlines() if line.startswith(
                'offset_ledger_lag_messages{consumer_group="offset-ledger.follow.mock",')]
            assert lags and all(line.endswith(" 0.0") for line in lags), metrics[-2000:]
        again = follow(tmp_path / "unused", cluster, "--server", server.url,
                       "--token-file", str(tmp_path / "follower.token"))
        assert again.returncode == 0 and json.loads(again.stdout)["records"] == 0
    finally:
        assert server.stop() == 0


def test_a_broker_that_is_down_is_one_line_and_a_signal_ends_the_wait(tmp_path: Path) -> None:
    """Nothing listens on the bootstrap address: the follower retries with backoff, says so
    once, and SIGTERM ends it with exit 0."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from tests.tools.crash_harness import _cli_command

    proc = subprocess.Popen([*_cli_command(), "--data-dir", str(tmp_path), "follow", "kafka",
                             "--bootstrap-server", f"127.0.0.1:{port}", "--cluster", "down"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    time.sleep(8)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = err.splitlines()
    assert len(lines) == 1 and "kafka unavailable" in lines[0], err
    assert "retrying with backoff" in lines[0]


def test_follow_help_imports_no_kafka_client() -> None:
    """confluent-kafka is the `kafka` extra: imported only when a follower starts."""
    import sys

    code = ("import sys\nfrom cli import app\ntry:\n    app(['follow', 'kafka', '--help'])\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "assert 'confluent_kafka' not in sys.modules\nprint('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[2], timeout=60)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr
    assert "--bootstrap-server" in r.stdout
