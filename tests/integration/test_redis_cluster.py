"""The engine's Redis store on a real three-node Redis Cluster started on loopback.

A session's keys share the hash tag of its namespace (``fl:{s<id>}``), so every Lua script
and every single-session MULTI/EXEC lands on one node; the multi-session export
(``RedisStore.export_states``) spans nodes and goes through redis-py's cluster pipeline,
which splits the commands by slot.

The cluster is three ``redis-server --cluster-enabled yes`` processes in a temporary
directory, joined with ``redis-cli --cluster create`` and stopped when the module's tests end.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster, key_slot

from labs.engine import (
    Breaker,
    BreakerConfig,
    FakeDependency,
    VirtualClock,
    parse_dependency,
    run_scenario,
)
from labs.engine.config import RetryBudgetConfig
from labs.engine.redis import RedisStore
from labs.engine.redis.store import SCOPES
from labs.engine.retry import RetryBudget
from labs.engine.scenario import EngineExecutor
from labs.live import runtime
from tests import servers
from tests.integration.conftest import ROOT

pytestmark = [pytest.mark.integration]

NODES = 3
START_TIMEOUT_S = 60.0


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _cluster_ports(count: int) -> list[int]:
    """Free ports whose cluster bus ports (port + 10000) are free too."""
    ports: list[int] = []
    candidates = list(range(20000, 55000))
    random.shuffle(candidates)
    for port in candidates:
        if port not in ports and _port_free(port) and _port_free(port + 10000):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise RuntimeError("no free ports for a Redis Cluster")


def _wait(predicate, what: str, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the Redis Cluster did not come up: {what} after {timeout}s")


@pytest.fixture(scope="module")
def cluster_nodes(tmp_path_factory) -> Iterator[list[int]]:
    """Three redis-server processes in cluster mode, joined into one cluster (no replicas)."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if not server or not cli:
        pytest.fail("the Redis Cluster test needs redis-server and redis-cli on PATH")
    work: Path = tmp_path_factory.mktemp("redis-cluster")
    ports = _cluster_ports(NODES)
    procs: list[subprocess.Popen] = []
    try:
        for port in ports:
            node_dir = work / str(port)
            node_dir.mkdir()
            with open(node_dir / "redis.log", "wb") as log:
                procs.append(
                    servers.start(
                        f"cluster node {port}",
                        [server, "--port", str(port), "--bind", "127.0.0.1",
                         "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                         "--save", "", "--appendonly", "no", "--dir", str(node_dir)],
                        stdout=log, stderr=subprocess.STDOUT,
                    )
                )  # fmt: skip
        for port in ports:
            _wait(lambda p=port: redis.Redis(port=p).ping(), f"node {port} answering PING")
        created = subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False,
        )  # fmt: skip
        if created.returncode != 0:
            raise RuntimeError(
                f"redis-cli --cluster create failed:\n{created.stdout}{created.stderr}"
            )
        for port in ports:
            _wait(
                lambda p=port: (
                    b"cluster_state:ok" in redis.Redis(port=p).execute_command("CLUSTER", "INFO")
                ),
                f"node {port} reporting cluster_state:ok",
            )
        yield ports
    finally:
        for proc in procs:
            servers.stop(proc, timeout=10)


def _client(ports: list[int]) -> RedisCluster:
    """A cluster client of its own, as another thread or process would have."""
    return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in ports])


@pytest.fixture
def cluster(cluster_nodes) -> Iterator[RedisCluster]:
    client = _client(cluster_nodes)
    _wait(lambda: len(client.get_primaries()) == NODES, "three primaries seen by the client")
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    yield client
    client.close()


def _store(client, session_id: int, **kwargs) -> RedisStore:
    return RedisStore(client, runtime.namespace(session_id), **kwargs)


def _node_of(client: RedisCluster, session_id: int) -> str:
    return client.get_node_from_key(runtime.namespace(session_id)).name


def _sessions_on_every_node(client: RedisCluster, per_node: int) -> list[int]:
    """Session ids whose namespaces live on each of the nodes, ``per_node`` of each."""
    by_node: dict[str, list[int]] = {}
    sid = 1
    while len(by_node) < NODES or min(len(v) for v in by_node.values()) < per_node:
        ids = by_node.setdefault(_node_of(client, sid), [])
        if len(ids) < per_node:
            ids.append(sid)
        sid += 1
    return sorted(i for ids in by_node.values() for i in ids)


def test_every_key_of_a_session_shares_one_slot():
    store = runtime.session_store(42, client=redis.Redis())  # no connection is made here
    keys = [*store.all_keys(), runtime.dependency_config_key(42)]
    assert len({key_slot(k.encode()) for k in keys}) == 1, keys
    assert key_slot(runtime.namespace(42).encode()) != key_slot(runtime.namespace(43).encode())


def test_every_key_of_a_sessions_hosts_and_b_shares_its_slot():
    store = runtime.session_store(42, client=redis.Redis())  # no connection is made here
    keys = [k for name in SCOPES for k in store.scoped(name).all_keys()]
    assert len({key_slot(k.encode()) for k in [*keys, *store.all_keys()]}) == 1, keys


def test_the_per_host_breakers_lesson_runs_on_a_cluster_as_in_memory(cluster):
    script = json.loads((ROOT / "scenarios" / "per_host_breakers.json").read_text())
    store = _store(cluster, 11)
    on_cluster = run_scenario(script, executor=EngineExecutor(seed=script["seed"], store=store))
    assert on_cluster == run_scenario(script)
    host_keys = [k.decode() for k in cluster.keys(f"{runtime.namespace(11)}:h1:*")]
    assert f"{runtime.namespace(11)}:h1:breaker" in host_keys
    store.clear()
    assert cluster.keys(f"{runtime.namespace(11)}:*") == []


def test_a_breaker_opens_and_its_state_reads_back_on_a_cluster(cluster, cluster_nodes):
    clock = VirtualClock()
    config = BreakerConfig(failure_threshold=3, cooldown_ms=1000)
    breaker = Breaker(config, store=_store(cluster, 7), clock=clock)
    for _ in range(3):
        breaker.record(breaker.allow(), "failure")
    assert breaker.state() == "open"
    rejected = breaker.allow()
    assert not rejected and rejected.reason == "open"
    # Another process's view of the same session (a client of its own) agrees.
    other = _client(cluster_nodes)
    try:
        assert Breaker(config, store=_store(other, 7), clock=clock).state() == "open"
    finally:
        other.close()
    breaker.reset("again")
    assert breaker.state() == "closed"


def test_one_probe_per_half_open_period_across_threads_on_a_cluster(cluster, cluster_nodes):
    """Twenty callers, each with a client and a breaker of its own (as on many workers), ask
    at the same moment in each of five half-open periods: exactly one probe each time."""
    clock = VirtualClock()
    config = BreakerConfig(failure_threshold=1, cooldown_ms=1000)
    callers = 20
    clients = [_client(cluster_nodes) for _ in range(callers)]
    breakers = [Breaker(config, store=_store(c, 11), clock=clock) for c in clients]
    try:
        opener = breakers[0]
        opener.record(opener.allow(), "failure")
        for period in range(5):
            assert opener.state() == "open", period
            clock.advance(1.0)  # the cooldown is over: the next ask turns half-open
            barrier = threading.Barrier(callers)
            answers: list = [None] * callers

            def ask(i: int, barrier=barrier, answers=answers) -> None:
                barrier.wait(30)
                answers[i] = breakers[i].allow()

            threads = [threading.Thread(target=ask, args=(i,)) for i in range(callers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            probes = [a for a in answers if a and a.probe]
            assert len(probes) == 1, (period, answers)
            assert sorted(a.reason for a in answers if not a) == ["half_open"] * (callers - 1)
            assert opener.snapshot()["probes_in_flight"] == 1
            holder = breakers[answers.index(probes[0])]
            holder.record(probes[0], "failure")  # the probe fails: open again
        clock.advance(1.0)
        probe = opener.allow()
        assert probe and probe.probe
        opener.record(probe, "success")
        assert opener.state() == "closed"
    finally:
        for c in clients:
            c.close()


def test_dependency_counters_and_budget_are_exact_under_threads_on_a_cluster(
    cluster, cluster_nodes
):
    clock = VirtualClock()
    store = _store(cluster, 23)
    config = parse_dependency({"mode": "flaky", "fail_count": 5, "latency_ms": 0})
    FakeDependency(config, store=store, clock=clock, rng=random.Random(1)).arm()
    budget = RetryBudget(RetryBudgetConfig(token_ratio=0.5, max_tokens=4), store=store)
    threads_n, each = 8, 10
    results: list[bool] = []
    withdrawn: list[bool] = []
    lock = threading.Lock()

    def work() -> None:
        client = _client(cluster_nodes)
        try:
            mine = _store(client, 23)
            dep = FakeDependency(config, store=mine, clock=clock, rng=random.Random(2))
            bud = RetryBudget(RetryBudgetConfig(token_ratio=0.5, max_tokens=4), store=mine)
            for _ in range(each):
                ok = dep.attempt().ok
                took, _ = bud.try_withdraw()
                with lock:
                    results.append(ok)
                    withdrawn.append(took)
        finally:
            client.close()

    threads = [threading.Thread(target=work) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == threads_n * each
    assert results.count(False) == 5  # the flaky counter is shared: exactly five failures
    assert store.export_state()["dependency"]["attempts"] == threads_n * each
    assert withdrawn.count(True) == 4  # the bucket starts full at 4 and nothing deposited
    assert budget.try_withdraw() == (False, 0.0)
    assert budget.deposit() == 0.5
    assert budget.deposit() == 1.0
    assert budget.try_withdraw() == (True, 0.0)


def test_export_import_and_export_states_across_every_node(cluster):
    clock = VirtualClock()
    ids = _sessions_on_every_node(cluster, per_node=3)
    assert len({_node_of(cluster, sid) for sid in ids}) == NODES
    empty = ids.pop()  # one session with no state at all
    for n, sid in enumerate(ids):
        store = _store(cluster, sid)
        breaker = Breaker(
            BreakerConfig(failure_threshold=2, cooldown_ms=500), store=store, clock=clock
        )
        for _ in range(n % 2 + 1):  # some open, some with a streak
            breaker.record(breaker.allow(), "failure")
        FakeDependency(
            parse_dependency({"mode": "flaky", "fail_count": n + 1}), store=store, clock=clock,
            rng=random.Random(n),
        ).arm()  # fmt: skip
        RetryBudget(RetryBudgetConfig(), store=store).try_withdraw()

    stores = [_store(cluster, sid) for sid in [*ids, empty]]
    alone = [s.export_state() if s.has_state() else None for s in stores]
    assert alone[-1] is None and all(alone[:-1])
    assert RedisStore.export_states(stores) == alone

    # Export, wipe, import into the same namespace: the same state comes back.
    first = stores[1]  # two failures: open
    saved = first.export_state()
    assert saved["breaker"]["state"] == "open"
    first.clear()
    assert not first.has_state()
    first.import_state(saved)
    assert first.export_state() == saved
    # And into another session's namespace, on whichever node that one lives.
    home = _node_of(cluster, ids[1])
    elsewhere = _store(cluster, next(sid for sid in ids if _node_of(cluster, sid) != home))
    elsewhere.import_state(saved)
    assert elsewhere.export_state() == saved
