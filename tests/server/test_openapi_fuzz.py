"""schemathesis against a real serve process, from its own `/openapi.json`: every operation
with generated (valid and invalid) input; no 5xx, every answer's status, content type and body
as the document says. Bounded and derandomized, so a run is reproducible and short.

The schema is the document `openapi_document` builds, loaded when the module is collected
(schemathesis's lazy fixture loader does not run on this pytest); the first test checks that it
is byte for byte what the server serves at /openapi.json."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from ledger.limits import NAME_PATTERN
from ledger.reads.documents import encode_json
from server.openapi import openapi_document
from tests.server.conftest import Server, raw

MAX_EXAMPLES = 100


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("fuzzed") / "data", "--max-body-bytes", "65536",
               "--max-commands", "64")
    try:
        yield s
    finally:
        s.kill()


#: Checks that cannot hold for an operation, and why. POST /v1/commands answers every item of
#: the array in place (200, the bad ones with their `error`, as `apply` does): an item the schema
#: refuses is not a refused request. A write's acceptance depends on the ledger's state (a
#: truncate of an unknown queue, a pull of a broadcast group without a client) and on rules JSON
#: Schema does not state (one reset scenario and one scope; an integer is never 1.0, which JSON
#: Schema calls an integer), and SQL must be one read-only statement: there a schema-valid body
#: can still be a 400. A lag series needs since <= until and at most LAG_SERIES_POINTS_MAX
#: steps between them, and history since <= until, which no parameter's schema can say alone.
#: The other reads keep every check: their parameters say all they need.
_WRITES = [("POST", "/v1/commit"), ("POST", "/v1/pull"), ("POST", "/v1/queues/append"),
           ("POST", "/v1/queues/truncate"), ("PUT", "/v1/groups/{group}"),
           ("DELETE", "/v1/groups/{group}"), ("POST", "/v1/groups/{group}/reset"),
           ("POST", "/v1/sql"), ("GET", "/v1/groups/{group}/lag/series"),
           ("GET", "/v1/lag/series"), ("GET", "/v1/history")]
EXCLUDED = {("POST", "/v1/commands"): [negative_data_rejection, positive_data_acceptance],
            **{w: [positive_data_acceptance] for w in _WRITES},
            # a read with a body of queue ids: 1.0 is refused as a queue id there too
            ("POST", "/v1/groups/{group}/generations"): [positive_data_acceptance]}
DOCUMENT = openapi_document(tokens=False)
schema = schemathesis.openapi.from_dict(DOCUMENT)
schemathesis.serializer.alias("application/x-ndjson", "text/plain")  # NDJSON: lines of text



def test_the_schema_fuzzed_is_the_one_served(fuzzed: Server) -> None:
    status, served = raw(fuzzed, "GET", "/openapi.json")
    assert status == 200
    assert served == json.loads(encode_json(DOCUMENT))


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
def test_every_answer_matches_the_openapi_document(case: schemathesis.Case, fuzzed: Server
                                                   ) -> None:
    excluded = list(EXCLUDED.get((case.method, case.path), []))
    if any(NAME_PATTERN.fullmatch(unquote(str(v))) is None for v in case.path_parameters.values()):
        # schemathesis reads a `%XX` in a generated path value as an escape already made, so a
        # valid name holding `%` (names may) can reach the server as another, invalid, name
        excluded.append(positive_data_acceptance)
    case.call_and_validate(base_url=fuzzed.url, excluded_checks=excluded)


def test_the_fuzzed_server_stops_cleanly(fuzzed: Server, tmp_path: Path) -> None:
    assert fuzzed.stop() == 0, fuzzed.stderr
    assert "Traceback" not in fuzzed.stderr, fuzzed.stderr
