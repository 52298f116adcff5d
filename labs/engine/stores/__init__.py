"""State stores: :class:`MemoryStore` (one process) and :class:`RedisStore` (shared)."""

from labs.engine.stores.base import AllowReply, BreakerSpec, RecordReply, Store, effective_state
from labs.engine.stores.memory import MemoryStore
from labs.engine.stores.redis_store import RedisStore

__all__ = [
    "AllowReply",
    "BreakerSpec",
    "MemoryStore",
    "RecordReply",
    "RedisStore",
    "Store",
    "effective_state",
]
