"""Shards: several ledgers used as one (DESIGN.md, "Scale path"). `cluster.toml` lists them;
a group lives on shard `abs(java_string_hash(group)) % N`; `Cluster` routes writes and a group's
reads to its shard, sends queue commands to every shard and merges the other reads."""

from ledger.cluster.cluster import Cluster, ShardsUnavailable
from ledger.cluster.config import ClusterSpec, ShardSpec, load_cluster, parse_cluster
from ledger.cluster.placement import java_string_hash, kafka_abs, shard_of
from ledger.cluster.shard import LocalShard, Shard, ShardUnavailable

__all__ = ["Cluster", "ClusterSpec", "LocalShard", "Shard", "ShardSpec", "ShardUnavailable",
           "ShardsUnavailable", "java_string_hash", "kafka_abs", "load_cluster", "parse_cluster",
           "shard_of"]
