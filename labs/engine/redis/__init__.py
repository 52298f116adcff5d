"""The engine's Redis side: :class:`RedisStore` (the breaker, budget and dependency state shared
by every process, one Lua script per decision) and :class:`RedisSharedModel` (the shared
dependency's model in Redis). Kept apart from the engine's root so that the pure engine reads
without Redis; ``labs.engine`` and ``labs.engine.redis`` import the same store protocol."""

from labs.engine.redis.shared import RedisSharedModel
from labs.engine.redis.store import RedisStore, load_scripts

__all__ = ["RedisSharedModel", "RedisStore", "load_scripts"]
