"""The Python client (server/client.py) against a real serve process: a consumer's pull/commit
loop to the end of its queues, the server's errors as the client's exceptions, and TLS with a
self-signed certificate (key in PKCS#8) that the client trusts through ca_certs."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3

from server.client import BadRequest, Forbidden, LedgerClient, Refused, Unauthorized
from tests.server.conftest import Server, add_token

G, T, QUEUES, MESSAGES = "billing", "orders", 3, 95


def test_a_consumer_loop_pulls_and_commits_to_the_end_of_its_queues(module_server: Server
                                                                    ) -> None:
    with module_server.client() as c:
        for q in range(QUEUES):
            c.request("POST", "/v1/queues/append", {"topic": T, "queue": q, "count": MESSAGES})
        c.request("PUT", f"/v1/groups/{G}", {"initial": "earliest"})
        assert c.lag(G)["status"] == "NOTFOUND"  # no offsets yet
        handled = {q: 0 for q in range(QUEUES)}
        for _ in range(100):  # bounded: 95 messages, 10 a pull
            moved = False
            for q in range(QUEUES):
                p = c.pull(G, T, q, client="worker-1", max=10)
                if p.count == 0:
                    continue
                assert p.next_offset == handled[q]  # no gap, nothing twice
                handled[q] += p.count
                r = c.commit(G, T, q, p.next_offset + p.count, client="worker-1",
                             generation=p.generation)
                assert r.accepted and r.seq is not None, r
                moved = True
            if not moved:
                break
        assert handled == {q: MESSAGES for q in range(QUEUES)}
        assert [row["committed_offset"] for row in c.progress(G, T)] == [MESSAGES] * QUEUES
        lag = c.lag(G)
        assert (lag["status"], lag["total_lag"]) == ("OK", 0)
        assert len(c.history(group=G, kind="commit")) == QUEUES * 10
        stale = c.commit(G, T, 0, 5, client="worker-1")
        assert (stale.accepted, stale.reason, stale.offset) == (False, "stale", MESSAGES)
        results = c.commands([{"op": "commit", "group": G, "topic": T, "queue_id": 0,
                               "offset": 1}, {"op": "nope"}])
        assert results[0]["reason"] == "stale" and "unknown op" in results[1]["error"]


def test_the_servers_errors_are_the_clients_exceptions(module_server: Server) -> None:
    with module_server.client() as c:
        c.request("POST", "/v1/queues/append", {"topic": "e", "queue": 0, "count": 10})
        with pytest.raises(BadRequest, match="invalid offset -1") as bad:
            c.commit("errors", "e", 0, -1)
        assert bad.value.status == 400
        with pytest.raises(BadRequest, match="no route") as missing:
            c.request("GET", "/v1/nothing")
        assert missing.value.status == 404
        assert c.commit("errors", "e", 0, 4).accepted
        plan = c.reset("errors", topic="e", to_offset=1)
        assert not plan.executed and plan.plan[0]["from_offset"] == 4
        assert c.commit("errors", "e", 0, 6).accepted  # the plan is stale now
        with pytest.raises(Refused, match="stale plan: queue e:0") as refused:
            c.reset("errors", to_offset=1, execute=True, plan=[
                {k: row[k] for k in ("topic", "queue_id", "from_offset", "to_offset")}
                for row in plan.plan])
        assert refused.value.status == 409
        assert c.progress("errors")[0]["committed_offset"] == 6


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, PKCS#8 PEM (openssl 3 writes that for -nodes)."""
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=120, stdin=subprocess.DEVNULL)
    assert key.read_text().startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8
    return cert, key


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path, dict[str, str]]]:
    root = tmp_path_factory.mktemp("tls")
    cert, key = _self_signed(root)
    tokens_file = root / "tokens.toml"
    tokens = {"worker": add_token(tokens_file, "worker", "consume", groups=(G,)),
              "producer": add_token(tokens_file, "producer", "produce")}
    s = Server(root / "data", "--tls-cert", str(cert), "--tls-key", str(key),
               "--tokens", str(tokens_file))
    try:
        yield s, cert, tokens
    finally:
        s.kill()


def test_tls_with_tokens_serves_a_client_that_trusts_the_certificate(
        tls: tuple[Server, Path, dict[str, str]]) -> None:
    server, cert, tokens = tls
    assert server.url.startswith("https://127.0.0.1:")
    with LedgerClient(server.url, token=tokens["producer"], ca_certs=str(cert)) as c:
        c.request("POST", "/v1/queues/append", {"topic": T, "queue": 0, "count": 20})
    with LedgerClient(server.url, token=tokens["worker"], ca_certs=str(cert)) as c:
        p = c.pull(G, T, 0, client="w", max=5)
        r = c.commit(G, T, 0, p.next_offset + p.count, client="w", generation=p.generation)
        assert r.accepted
        assert c.progress(G)[0]["committed_offset"] == p.next_offset + p.count
        with pytest.raises(Forbidden, match="forbidden: worker") as forbidden:
            c.pull("payroll", T, 0, client="w")
        assert forbidden.value.status == 403
        with pytest.raises(Forbidden):
            c.reset(G, topic=T, to_earliest=True)
    with LedgerClient(server.url, token="not-a-token", ca_certs=str(cert)) as c, \
            pytest.raises(Unauthorized, match="unknown token") as unknown:
        c.progress(G)
    assert unknown.value.status == 401
    with LedgerClient(server.url, ca_certs=str(cert)) as c, pytest.raises(Unauthorized):
        c.progress(G)


def test_tls_refuses_a_client_that_does_not_trust_the_certificate(
        tls: tuple[Server, Path, dict[str, str]]) -> None:
    server, _, tokens = tls
    with LedgerClient(server.url, token=tokens["worker"]) as c, \
            pytest.raises(urllib3.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        c.progress(G)
    plain = server.url.replace("https://", "http://")
    with LedgerClient(plain, token=tokens["worker"], timeout_s=10) as c, \
            pytest.raises((urllib3.exceptions.HTTPError, ConnectionError)):
        c.progress(G)  # plain HTTP on the TLS port is no answer


def test_the_tls_server_stops_cleanly(tls: tuple[Server, Path, dict[str, str]]) -> None:
    server, _, _ = tls
    assert server.stop() == 0
    assert "Traceback" not in server.stderr, server.stderr
