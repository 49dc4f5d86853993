"""librdkafka's mock cluster, as the confluent-kafka wheel ships it, for the tests and the bench.

`test.mock.num.brokers` starts the same mock cluster inside a client, but leaves no way to make
a topic of 8 partitions (auto-created topics get 4, and the mock has no controller for
CreateTopics) or to shorten the group's initial rebalance delay (3 s per new group). So this
calls the mock's C API in the wheel's own librdkafka (rdkafka_mock.h: `rd_kafka_mock_cluster_new`
is what `test.mock.num.brokers` calls): brokers on loopback, in this process, which clients in
any process reach through `bootstrap`.
"""

from __future__ import annotations

import ctypes
import glob
import os

import confluent_kafka

_RD_KAFKA_PRODUCER = 0


def _library() -> ctypes.CDLL:
    libs = os.path.join(os.path.dirname(confluent_kafka.__file__), os.pardir,
                        "confluent_kafka.libs")
    found = sorted(glob.glob(os.path.join(libs, "librdkafka*.so*")))
    if not found:
        raise RuntimeError(f"no librdkafka in {os.path.abspath(libs)}: the mock cluster needs "
                           "the confluent-kafka wheel's own library")
    lib = ctypes.CDLL(found[0])
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                               ctypes.c_int]
    lib.rd_kafka_mock_group_initial_rebalance_delay_ms.argtypes = [ctypes.c_void_p,
                                                                   ctypes.c_int]
    return lib


class MockKafka:
    """A mock cluster of `brokers` brokers; `bootstrap` is its bootstrap.servers."""

    def __init__(self, brokers: int = 3, *, initial_rebalance_delay_ms: int = 100) -> None:
        self._lib = _library()
        error = ctypes.create_string_buffer(512)
        self._rk = self._lib.rd_kafka_new(_RD_KAFKA_PRODUCER, self._lib.rd_kafka_conf_new(),
                                          error, len(error))
        if not self._rk:
            raise RuntimeError(f"librdkafka: {error.value.decode(errors='replace')}")
        self._cluster = self._lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._cluster:
            self._lib.rd_kafka_destroy(self._rk)
            raise RuntimeError("librdkafka could not start a mock cluster")
        self._lib.rd_kafka_mock_group_initial_rebalance_delay_ms(self._cluster,
                                                                 initial_rebalance_delay_ms)
        self.bootstrap: str = self._lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()

    def create_topic(self, name: str, partitions: int, replication: int = 1) -> None:
        code = self._lib.rd_kafka_mock_topic_create(self._cluster, name.encode(), partitions,
                                                    replication)
        if code != 0:
            raise RuntimeError(f"the mock cluster did not create topic {name!r}: error {code}")

    def close(self) -> None:
        if self._cluster:
            self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
            self._lib.rd_kafka_destroy(self._rk)
            self._cluster = self._rk = None

    def __enter__(self) -> MockKafka:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
