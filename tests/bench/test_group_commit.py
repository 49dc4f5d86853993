"""The stacks' shared committer: one write + fsync per batch, answers only after it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from bench.http_stacks.group_commit import BadRequest, CommitRequest, GroupCommitter, decode_commit


def test_concurrent_commits_share_batches_and_all_reach_the_file(tmp_path: Path) -> None:
    path = tmp_path / "log"

    async def main() -> list[int]:
        committer = GroupCommitter(str(path), "thread")
        committer.start()
        reqs = [CommitRequest("g", "t", i, i * 10) for i in range(200)]
        offsets = await asyncio.gather(*(committer.submit(r) for r in reqs))
        assert committer.batches < 200  # requests queued during a sync joined the next batch
        await committer.stop()
        return list(offsets)

    assert asyncio.run(main()) == [i * 10 for i in range(200)]
    lines = path.read_bytes().splitlines()
    assert sorted(msgspec.json.decode(x, type=CommitRequest).queue_id for x in lines) == list(range(200))


def test_stop_answers_every_queued_commit_first(tmp_path: Path) -> None:
    async def main() -> list[int]:
        committer = GroupCommitter(str(tmp_path / "log"), "inline", delay_ms=20)
        committer.start()
        tasks = [asyncio.ensure_future(committer.submit(CommitRequest("g", "t", 0, i))) for i in range(5)]
        await asyncio.sleep(0)
        await committer.stop()
        return [t.result() for t in tasks]

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("body, field", [
    (b'{"group":"g","topic":"t","queue_id":1}', "offset"),
    (b'{"group":"","topic":"t","queue_id":1,"offset":1}', "group"),
    (b'{"group":"g","topic":"t","queue_id":1,"offset":1,"extra":1}', "extra"),
])
def test_bad_bodies_name_the_bad_field(body: bytes, field: str) -> None:
    with pytest.raises(BadRequest, match=field):
        decode_commit(body)
