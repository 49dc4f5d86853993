"""A real S3 API on loopback for the whole session: moto's server, which enforces conditional
writes (`If-Match`, `If-None-Match: *`). Each test gets its own prefix in one bucket."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

BUCKET = "ledger-tests"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_REGION": "us-east-1"}


@dataclass
class S3:
    """The moto server's endpoint, a boto3 client on it, and the environment a subprocess needs."""

    endpoint: str
    client: Any

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, **CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def keys(self, prefix: str) -> list[str]:
        """Object keys under `prefix/`, sorted, relative to it."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix=prefix + "/")
        return sorted(o["Key"][len(prefix) + 1:] for p in pages for o in p.get("Contents", []))


@pytest.fixture(scope="session")
def s3() -> Iterator[S3]:
    import boto3
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    try:
        yield S3(endpoint, client)
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def prefix() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"
