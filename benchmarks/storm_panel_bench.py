"""The storm panel's update latency: an attempt counted in Redis to the tick that carries it.

    .venv/bin/python benchmarks/storm_panel_bench.py --url http://127.0.0.1:8000 --classroom 1 \\
        --username instructor --password failurelab [--sessions 30] [--rate 10] [--seconds 20]

Against a running lab (``make run``) whose class ``--classroom`` has a shared dependency and
is taught by ``--username``. The script logs in through the login form, opens the storm
panel's websocket (``ws/classes/<id>/storm/``, the socket the page opens) and meanwhile makes
``--sessions`` callers send ``--rate`` attempts a second each straight to the class's shared
model in Redis (``REDIS_URL`` + ``REDIS_DB_BASE``, as the lab's settings read them; one
``EVALSHA`` an attempt, as a worker does), noting the wall time of each. For every second the
ticks report, the n-th attempt of that second is delivered by the first message whose
``offered`` for that second reaches n: latency = receipt time minus the attempt's write time.
It includes the consumer's tick (every 0.5 s), its Redis read and the websocket. Target: p99
<= 1 s.

``--browser`` opens the panel itself in headless Chromium (Debian's ``chromium``, or
``LAB_CHROMIUM``) instead, logged in through the form: latency then runs to the moment the
page's charts have drawn a point carrying the attempt (``storm.js`` notes, after each draw,
the wall time and the last seconds' offered counts drawn), and Chromium's long tasks
(``PerformanceObserver``, main-thread tasks over 50 ms, wall time) are counted from the first
update on, beside the number of updates drawn.
"""

from __future__ import annotations

import argparse
import asyncio
import http.cookiejar
import json
import os
import re
import shutil
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis
import websockets

from benchmarks.bench_common import Bench, int_range, pct, run
from labs.engine.redis.shared import RedisSharedModel


def login(url: str, username: str, password: str) -> str:
    """The session cookie after logging in through the real login form."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(f"{url}/accounts/login/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    data = urllib.parse.urlencode(
        {"username": username, "password": password, "csrfmiddlewaretoken": token}
    ).encode()
    request = urllib.request.Request(  # noqa: S310 (http from --url)
        f"{url}/accounts/login/", data=data, headers={"Referer": f"{url}/accounts/login/"}
    )
    opener.open(request).read()
    cookies = {c.name: c.value for c in jar}
    if "sessionid" not in cookies:
        raise SystemExit("login failed: check --username and --password")
    return "; ".join(f"{k}={v}" for k, v in cookies.items())


def callers(model: RedisSharedModel, sessions: int, rate: int, seconds: int, writes, stop):
    """``sessions`` threads, each deciding ``rate`` attempts a second, evenly spaced; every
    write's (second as Redis stamps it, wall time after the reply) goes into ``writes``."""
    lock = threading.Lock()

    def run(i: int) -> None:
        start = time.time() + i / (sessions * rate)
        for n in range(rate * seconds):
            due = start + n / rate
            time.sleep(max(0.0, due - time.time()))
            if stop.is_set():
                return
            model.decide(attempt=1)
            done = time.time()
            second = int(model.client.time()[0])  # the clock that stamps the counters
            with lock:
                writes[second].append(done)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(sessions)]
    for t in threads:
        t.start()
    return threads


async def listen(ws_url: str, cookie: str, origin: str, writes, latencies, until: float):
    delivered: dict[int, int] = defaultdict(int)
    async with websockets.connect(
        ws_url, additional_headers={"Cookie": cookie}, origin=origin
    ) as socket:
        while time.time() < until:
            try:
                raw = await asyncio.wait_for(socket.recv(), timeout=max(0.1, until - time.time()))
            except TimeoutError:
                break
            got = time.time()
            message = json.loads(raw)
            for point in message.get("seconds", []):
                sec, offered = point["second"], point["offered"]
                stamps = sorted(writes.get(sec, []))
                if message["type"] == "snapshot":
                    delivered[sec] = max(delivered[sec], offered)
                    continue
                for n in range(delivered[sec], min(offered, len(stamps))):
                    latencies.append(got - stamps[n])
                delivered[sec] = max(delivered[sec], offered)


#: Chromium's long tasks from page load on, as tests/e2e/test_storm_panel.py collects them.
LONG_TASKS = """
window.__longTasks = [];
new PerformanceObserver(function (list) {
  list.getEntries().forEach(function (e) { window.__longTasks.push([e.startTime, e.duration]); });
}).observe({ type: "longtask", buffered: true });
"""


def browse(args, writes, latencies, stop) -> tuple[int, list[float]]:
    """Open the panel in headless Chromium while the callers run; fill ``latencies`` from the
    page's draws. Returns the updates drawn and the long tasks' durations (ms) after the
    first draw."""
    from playwright.sync_api import sync_playwright

    executable = os.environ.get("LAB_CHROMIUM") or shutil.which("chromium")
    if not executable:
        raise SystemExit("--browser needs Chromium: apt-get install chromium, or LAB_CHROMIUM")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1920, "height": 1080})
            page.add_init_script(LONG_TASKS)
            page.goto(f"{args.url}/accounts/login/")
            page.fill("#id_username", args.username)
            page.fill("#id_password", args.password)
            with page.expect_navigation():
                page.click("button[type=submit]")
            page.goto(f"{args.url}/classes/{args.classroom}/storm/")
            page.wait_for_function("() => window.failureLabStorm.stats.draws > 0", timeout=30_000)
            first = page.evaluate("() => performance.now()")
            threads = callers(RedisSharedModel(*args.model), args.sessions, args.rate,
                              args.seconds, writes, stop)  # fmt: skip
            try:
                time.sleep(args.seconds + 3)
            finally:
                stop.set()
                for t in threads:
                    t.join(5)
            drawn = page.evaluate("() => window.failureLabStorm.stats.drawn")
            updates = page.evaluate(
                "t => window.failureLabStorm.stats.drawAt.filter(x => x > t).length", first
            )
            long_tasks = page.evaluate(
                "t => window.__longTasks.filter(e => e[0] > t).map(e => e[1])", first
            )
        finally:
            browser.close()
    shown: dict[int, int] = defaultdict(int)
    for at_ms, seconds in drawn:
        for sec, offered in seconds:
            stamps = sorted(writes.get(sec, []))
            for n in range(shown[sec], min(offered, len(stamps))):
                latencies.append(at_ms / 1000 - stamps[n])
            shown[sec] = max(shown[sec], offered)
    return updates, long_tasks


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--classroom", type=int_range(1, 2**31 - 1), required=True)
    parser.add_argument("--username", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--sessions", type=int_range(1, 500), default=30, help="1 to 500")
    parser.add_argument("--rate", type=int_range(1, 20), default=10, help="1 to 20")
    parser.add_argument("--seconds", type=int_range(1, 3600), default=20, help="1 to 3,600")
    parser.add_argument("--browser", action="store_true",
                        help="measure to the point drawn in headless Chromium, and count "
                             "its long tasks")  # fmt: skip
    return parser


def measure(args, bench: Bench) -> None:

    base = int(os.environ.get("REDIS_DB_BASE", "0"))
    client = redis.Redis.from_url(
        os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"), db=base + 2
    )
    model = RedisSharedModel(client, f"class:{args.classroom}")
    try:
        model.config  # noqa: B018 (raises LookupError when the class has no shared model)
    except LookupError:
        sys.exit(
            f"class {args.classroom}'s shared dependency is not in Redis at REDIS_URL db "
            f"{base + 2}: the lab writes it there the first time the class's traffic starts or "
            "a trigger fires (fire one from the storm panel), and REDIS_URL / REDIS_DB_BASE "
            "must be the lab's"
        )
    cookie = login(args.url, args.username, args.password)
    ws_url = args.url.replace("http", "ws", 1) + f"/ws/classes/{args.classroom}/storm/"
    writes: dict[int, list[float]] = defaultdict(list)
    latencies: list[float] = []
    stop = threading.Event()
    browsed = None
    if args.browser:
        args.model = (client, f"class:{args.classroom}")
        browsed = browse(args, writes, latencies, stop)
    else:
        threads = callers(model, args.sessions, args.rate, args.seconds, writes, stop)
        try:
            asyncio.run(
                listen(ws_url, cookie, args.url, writes, latencies, time.time() + args.seconds + 3)
            )
        finally:
            stop.set()
            for t in threads:
                t.join(5)
    total = sum(len(v) for v in writes.values())
    print(
        f"{args.sessions} callers x {args.rate} attempts/s for {args.seconds} s: {total} attempts"
    )
    if not latencies:
        raise SystemExit("no attempt was delivered")
    ms = [x * 1000 for x in latencies]
    if browsed is not None:
        updates, long_tasks = browsed
        print(f"drawn in Chromium: {updates} updates; long tasks (over 50 ms) after the first: "
              f"{len(long_tasks)}{f', longest {max(long_tasks):.0f} ms' if long_tasks else ''}")  # fmt: skip
    print(f"| attempts {'drawn' if browsed is not None else 'delivered'} | p50 ms | p90 ms "
          "| p99 ms | max ms |")  # fmt: skip
    print("|---|---|---|---|---|")
    print(
        f"| {len(ms)} | {pct(ms, 0.5):.0f} | {pct(ms, 0.9):.0f} | {pct(ms, 0.99):.0f} "
        f"| {max(ms):.0f} |"
    )


if __name__ == "__main__":
    run("storm_panel_bench", parser(), measure)
