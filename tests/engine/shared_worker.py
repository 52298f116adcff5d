"""Helper process for the shared-dependency exactness test (not a test module).

``URL MODEL_ID THREADS ATTEMPTS SEED``: prints ``ready``, waits for a line on stdin, then
THREADS threads each make ATTEMPTS attempts through a :class:`SharedDependency` on the Redis
model (Redis's time), sleeping for real until each answer (some with a short attempt
timeout); prints one JSON list of every decision.
"""

from __future__ import annotations

import json
import random
import sys
import threading

import redis

from labs.engine import SharedDependency, SystemClock
from labs.engine.redis import RedisSharedModel


def main(url: str, model_id: str, threads: int, attempts: int, seed: int) -> None:
    client = redis.Redis.from_url(url)
    model = RedisSharedModel(client, model_id)
    clock = SystemClock("wall")
    client.ping()
    print("ready", flush=True)
    sys.stdin.readline()
    decisions: list[dict] = []
    lock = threading.Lock()

    def caller(n: int) -> None:
        rng = random.Random(f"{seed}:{n}")
        dependency = SharedDependency(model, clock=clock)
        for i in range(attempts):
            result = dependency.attempt(rng.choice([None, None, 10]), attempt=1 + i % 3)
            with lock:
                decisions.append(result.data)

    workers = [threading.Thread(target=caller, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(json.dumps(decisions), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
