"""librdkafka's mock cluster (shipped in the confluent-kafka wheel), driven through the C API
the wheel's librdkafka exports, so tests control it: topics created with the partitions they
want, brokers set down and up. It listens on loopback; any client, in this process or another,
reaches it by `bootstrap`. (The Python API offers only `test.mock.num.brokers` on a client,
whose mock topics are auto-created with 4 partitions and cannot be created otherwise.) The
mock neither compacts nor writes `__consumer_offsets` itself: tests produce its records."""

from __future__ import annotations

import ctypes
from pathlib import Path

import confluent_kafka

_PRODUCER = 0


def _library() -> ctypes.CDLL:
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        raise RuntimeError(f"no librdkafka in {libs}")
    lib = ctypes.CDLL(str(found[0]))
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                               ctypes.c_int]
    lib.rd_kafka_mock_broker_set_down.argtypes = [ctypes.c_void_p, ctypes.c_int32]
    lib.rd_kafka_mock_broker_set_up.argtypes = [ctypes.c_void_p, ctypes.c_int32]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    return lib


class MockCluster:
    """A mock Kafka cluster of `brokers` brokers on loopback."""

    def __init__(self, brokers: int = 3) -> None:
        self.lib = _library()
        errstr = ctypes.create_string_buffer(512)
        self._rk = self.lib.rd_kafka_new(_PRODUCER, self.lib.rd_kafka_conf_new(), errstr, 512)
        if not self._rk:
            raise RuntimeError(f"rd_kafka_new: {errstr.value.decode()}")
        self._mc = self.lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._mc:
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.brokers = brokers
        self.bootstrap = self.lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()

    def create_topic(self, name: str, partitions: int, replication: int = 1) -> None:
        err = self.lib.rd_kafka_mock_topic_create(self._mc, name.encode(), partitions, replication)
        if err:
            raise RuntimeError(f"mock topic {name}: error {err}")

    def set_down(self, broker_id: int) -> None:
        self.lib.rd_kafka_mock_broker_set_down(self._mc, broker_id)

    def set_up(self, broker_id: int) -> None:
        self.lib.rd_kafka_mock_broker_set_up(self._mc, broker_id)

    def close(self) -> None:
        if self._mc:
            self.lib.rd_kafka_mock_cluster_destroy(self._mc)
            self._mc = None
        if self._rk:
            self.lib.rd_kafka_destroy(self._rk)
            self._rk = None
