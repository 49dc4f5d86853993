"""cluster.toml: shards in order, roots relative to the file, servers and segments checked;
every mistake is one line naming the file, the shard and the bad value (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.cluster import load_cluster
from tests.cluster.conftest import ClusterCli
from tests.support.cli import assert_one_line_error


def test_a_cluster_file_lists_shards_in_order(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    file = tmp_path / "conf" / "cluster.toml"
    file.write_text('[[shard]]\nroot = "a"\n\n[[shard]]\nroot = "/srv/b"\n'
                    'server = "http://10.0.0.2:9888/"\nsegments = "s3://ledger/shard-1"\n')
    spec = load_cluster(file)
    assert [s.index for s in spec.shards] == [0, 1]
    assert spec.shards[0].root == tmp_path / "conf" / "a"
    assert spec.shards[0].server is None
    assert spec.shards[1].root == Path("/srv/b")
    assert spec.shards[1].server == "http://10.0.0.2:9888"
    assert spec.shards[1].segments == "s3://ledger/shard-1"
    assert spec.shard_for("my-group").index == 0  # abs(hash) % 2
    assert spec.shard_for("billing").index == 1


@pytest.mark.parametrize(("text", "fragments"), [
    ("", ("lists no shard",)),
    ("[[shard]]\nroot = 3\n", ("shard 0 needs root", "3")),
    ('[[shard]]\nroot = "a"\nhost = "x"\n', ("shard 0", "unknown key 'host'")),
    ('[[shard]]\nroot = "a"\n[[shard]]\nroot = "b"\nserver = "ftp://h:1"\n',
     ("shard 1", "invalid server 'ftp://h:1'")),
    ('[[shard]]\nroot = "a"\nserver = "http://h"\n', ("invalid server 'http://h'",)),
    ('[[shard]]\nroot = "a"\nserver = "http://h:9/x"\n', ("invalid server 'http://h:9/x'",)),
    ('[[shard]]\nroot = "a"\nsegments = "/tmp/x"\n', ("invalid segments '/tmp/x'",)),
    ('[[shard]]\nroot = "a"\n[[shard]]\nroot = "./a"\n', ("shards 0 and 1 have the same root",)),
    ('[[shard]]\nroot = "a"\nserver = "http://h:1"\n[[shard]]\nroot = "b"\n'
     'server = "http://h:1"\n', ("shards 0 and 1 have the same server",)),
    ("[shard]\nroot = 'a'\n", ("lists no shard",)),
    ("shards = 1\n", ("unknown key 'shards'",)),
    ("[[shard]\n", ("is not valid TOML",)),
])
def test_a_bad_cluster_file_is_one_line_naming_the_value(tmp_path: Path, text: str,
                                                        fragments: tuple[str, ...]) -> None:
    file = tmp_path / "cluster.toml"
    file.write_text(text)
    assert_one_line_error(ClusterCli(file)("group", "list"), 2, "cluster.toml", *fragments)


def test_a_missing_cluster_file_is_named(tmp_path: Path) -> None:
    assert_one_line_error(ClusterCli(tmp_path / "nope.toml")("group", "list"), 2,
                          "cluster file", "nope.toml", "does not exist")
