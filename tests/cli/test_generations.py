"""What a Kafka consumer asks of the ledger, from the CLI: a pull of `--max 0`, a commit
`--owner-only`, and `generations` (the consumer's periodic check) as a table and as JSON."""

from __future__ import annotations

from tests.cli.conftest import G, T
from tests.support.cli import Cli, assert_one_line_error


def test_a_pull_of_max_zero_then_an_owner_only_commit_and_generations(committed: Cli) -> None:
    assert committed.json("pull", "--group", G, "--topic", T, "--queue", "1", "--client", "k1",
                          "--max", "0") == {"seq": 11, "next_offset": 100, "generation": 0,
                                            "count": 0}
    stray = committed.json("commit", "--group", G, "--topic", T, "--queue", "1", "--offset",
                           "150", "--client", "k2", "--owner-only", code=1)
    assert (stray["accepted"], stray["reason"], stray["offset"]) == (False, "fenced", 100)
    assert committed.json("commit", "--group", G, "--topic", T, "--queue", "1", "--offset",
                          "150", "--client", "k1", "--owner-only")["accepted"]
    rows = committed.json("generations", "--group", G)
    assert rows == [
        {"topic": T, "queue_id": 0, "generation": 0, "pending": False, "committed_offset": 100,
         "last_client": "c1"},
        {"topic": T, "queue_id": 1, "generation": 0, "pending": False, "committed_offset": 150,
         "last_client": "k1"}]
    assert committed.json("generations", "--group", G, "--topic", f"{T}:1,5") == [
        rows[1], {"topic": T, "queue_id": 5, "generation": 0, "pending": False,
                  "committed_offset": None, "last_client": None}]
    table = committed("generations", "--group", G).stdout.splitlines()
    assert table[0].split() == ["topic", "queue_id", "generation", "pending",
                                "committed_offset", "last_client"]
    assert table[3].split() == [T, "1", "0", "false", "150", "k1"]


def test_owner_only_without_a_client_and_a_bad_topic_spec_are_one_line_errors(
        committed: Cli) -> None:
    before = committed.events()
    r = committed("commit", "--group", G, "--topic", T, "--queue", "0", "--offset", "150",
                  "--owner-only")
    assert_one_line_error(r, 2, "owner_only needs a client")
    assert_one_line_error(committed("generations", "--group", G, "--topic", "t:x"), 2,
                          "invalid --topic 't:x'")
    assert committed.events() == before
