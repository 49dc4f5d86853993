"""PySpark jobs over ledger logs: compaction, point-in-time replay, audit (DESIGN.md, Spark).

pyspark is imported only inside these jobs, so importing this package starts no JVM.
"""

from spark_compaction.auditor import audit
from spark_compaction.compaction import compact
from spark_compaction.session import read_events, spark_session
from spark_compaction.timeline import replay

__all__ = ["audit", "compact", "read_events", "replay", "spark_session"]
