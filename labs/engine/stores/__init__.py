"""State stores: the :class:`Store` protocol and :class:`MemoryStore` (one process). The Redis
store, shared by every process, is :class:`labs.engine.redis.RedisStore`."""

from labs.engine.stores.base import AllowReply, BreakerSpec, RecordReply, Store, effective_state
from labs.engine.stores.memory import MemoryStore

__all__ = [
    "AllowReply",
    "BreakerSpec",
    "MemoryStore",
    "RecordReply",
    "Store",
    "effective_state",
]
