"""The PostgreSQL reference: a throwaway durable cluster, and a server that keeps the ledger's rules."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import pg_cluster as pgc
from bench.baselines.pg_bench import reference_target
from bench.http_stacks.measure import RunningServer


@pytest.fixture(scope="module")
def pg() -> Iterator[pgc.PgCluster]:
    try:
        pgc.find_bin_dir()
    except pgc.PostgresMissing as exc:
        pytest.fail(str(exc))  # fail, never skip: the reference benchmark needs PostgreSQL
    with pgc.pg_cluster() as cluster:
        yield cluster


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_missing_postgres_names_the_package_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pgc.glob, "glob", lambda pattern: [])
    with pytest.raises(pgc.PostgresMissing, match="apt-get install postgresql"):
        pgc.find_bin_dir()


def test_cluster_is_durable_and_leaves_nothing_behind() -> None:
    try:
        pgc.find_bin_dir()
    except pgc.PostgresMissing as exc:
        pytest.fail(str(exc))
    with pgc.pg_cluster() as cluster:
        assert cluster.psql("SHOW fsync") == "on"
        assert cluster.psql("SHOW synchronous_commit") == "on"
        assert cluster.psql("SHOW listen_addresses") == "127.0.0.1"
        root = cluster.data_dir.parent
        assert root.exists()
    assert not root.exists()


@pytest.mark.parametrize("front, sql", [("aiohttp", "cte"), ("aiohttp", "tx"), ("granian-rsgi", "cte")])
def test_reference_server_refuses_stale_commits_with_409(pg: pgc.PgCluster, tmp_path: Path, front: str,
                                                         sql: str) -> None:
    target = reference_target(front, pg.dsn, 2, sql)
    key = {"group": f"g-{front}-{sql}", "topic": "orders", "queue_id": 3}
    with RunningServer(target, tmp_path / "server.out") as server:
        assert _post(server.commit_url, {**key, "offset": 10, "client": "c1"}) == (
            200, {"accepted": True, "offset": 10})
        assert _post(server.commit_url, {**key, "offset": 10})[0] == 200  # equal: accepted again
        status, body = _post(server.commit_url, {**key, "offset": 4})
        assert (status, body["accepted"], body["offset"]) == (409, False, 10)
        status, body = _post(server.commit_url, {**key, "queue_id": -1, "offset": 1})
        assert status == 400 and "queue_id" in body["error"]
        assert _post(server.commit_url, {**key, "offset": 11})[0] == 200
    where = f"consumer_group = 'g-{front}-{sql}'"
    assert pg.psql(f'SELECT "offset" FROM offsets WHERE {where}') == "11"
    history = pg.psql(f"SELECT string_agg(\"offset\"::text, ',' ORDER BY seq) FROM history WHERE {where}")
    assert history == "10,10,11"
