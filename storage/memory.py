"""Where Arrow's buffers come from: jemalloc, unless the user chose (ARROW_DEFAULT_MEMORY_POOL).

The log's writers allocate and free hundreds of MB a second in buffers of a few MB (a fold's
columns, frames, the seal's sorted copy). pyarrow's default pool here, mimalloc, hands freed
pages back to the OS after about 10 ms, so nearly every such buffer faulted its pages in
afresh: 1.5-3 s of system time in a 1M-command `apply_arrow` (mixed feed: 2.65-2.96 s wall
with mimalloc against 1.8-2.3 s with jemalloc, commits-only 1.55-1.59 against 1.10-1.34 s;
peak RSS 15% lower). glibc's malloc is as fast but holds 50-80 MB more, and per-thread
arenas grow in a long-running server.
"""

from __future__ import annotations

import logging
import os
import threading

import pyarrow as pa

logger = logging.getLogger(__name__)
_ENV = "ARROW_DEFAULT_MEMORY_POOL"
_chosen = threading.Lock()
_done = False


def use_jemalloc() -> str:
    """Make jemalloc Arrow's default pool for this process, once (a pyarrow built without it,
    or a pool named in ARROW_DEFAULT_MEMORY_POOL, is left as it is). Returns the pool's name.
    Buffers allocated before keep the pool they came from, so this is safe at any time."""
    global _done
    with _chosen:
        if not _done and not os.environ.get(_ENV):
            try:
                pa.set_memory_pool(pa.jemalloc_memory_pool())
            except NotImplementedError:
                logger.debug("pyarrow has no jemalloc: keeping the %s pool",
                             pa.default_memory_pool().backend_name)
        _done = True
    return pa.default_memory_pool().backend_name
