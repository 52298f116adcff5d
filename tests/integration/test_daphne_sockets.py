"""Socket limits through a real daphne (the command of lab_project.processes) and real
websocket clients over TCP: a frame over the size limit is closed with 1009, and a client that
never reads is closed before what daphne buffers for it grows without bound, while a client
that reads keeps getting its pushes.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from labs.journal import broadcast
from labs.journal import store as journal
from labs.services import lab
from tests.conftest import make_classroom, make_instructor, make_scenario, make_student
from tests.integration.conftest import DaphneProcess, subprocess_env

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

#: What the daphne of these tests may buffer for one socket before closing it.
SEND_BUFFER_MAX = 1024 * 1024



def limited_daphne(log_path: Path) -> DaphneProcess:
    """A daphne process with a small send-buffer limit (the slow-reader test fills it)."""
    env = subprocess_env()
    env["LAB_WS_SEND_BUFFER_MAX_BYTES"] = str(SEND_BUFFER_MAX)
    return DaphneProcess(log_path, env=env)


@pytest.fixture
def daphne(transactional_db, tmp_path):
    server = limited_daphne(tmp_path / "daphne.log")
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def world(db):
    scenario = make_scenario("tour", title="The tour")
    room = make_classroom("Resilience A", join_code="CLASSA01")
    room.scenarios.add(scenario)
    alice = make_student("alice", room)
    session = lab.session_open(user=alice, classroom=room, scenario=scenario)
    return {"session": session, "alice": alice, "teacher": make_instructor("teacher", room)}


def cookie_for(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def open_socket(daphne: DaphneProcess, path: str, user):
    return connect(
        f"ws://127.0.0.1:{daphne.port}{path}",
        origin=daphne.base,
        additional_headers={"Cookie": cookie_for(user)},
        max_size=None,
        open_timeout=10,
    )


def test_a_frame_over_the_size_limit_is_closed_with_1009(daphne, world):
    session = world["session"]
    with open_socket(daphne, f"/ws/sessions/{session.pk}/", world["alice"]) as ws:
        assert '"state"' in ws.recv(timeout=10)
        with pytest.raises(ConnectionClosed) as closed:
            ws.send("x" * (1024 * 1024 + 1))
            while True:
                ws.recv(timeout=10)
    assert closed.value.rcvd is not None, "the socket was dropped without a close frame (1006)"
    assert closed.value.rcvd.code == 1009


def test_a_frame_over_the_size_limit_closes_only_that_socket(daphne, world):
    session = world["session"]
    path = f"/ws/sessions/{session.pk}/"
    with open_socket(daphne, path, world["teacher"]) as other:
        assert '"state"' in other.recv(timeout=10)
        with open_socket(daphne, path, world["alice"]) as ws:
            assert '"state"' in ws.recv(timeout=10)
            with pytest.raises(ConnectionClosed):
                ws.send("x" * (2 * 1024 * 1024))
                while True:
                    ws.recv(timeout=10)
        other.send('{"type": "ping"}')
        assert '"pong"' in other.recv(timeout=10)


# --- a client that never reads -----------------------------------------------------------------


def masked_text_frame(text: str) -> bytes:
    """A client-to-server websocket text frame (clients must mask)."""
    payload = text.encode()
    mask = os.urandom(4)
    assert len(payload) < 126
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return struct.pack("!BB", 0x81, 0x80 | len(payload)) + mask + masked


class StalledClient:
    """A raw TCP websocket client with a tiny receive buffer that never reads after the
    handshake (it still sends a ping now and then, as a live page does)."""

    def __init__(self, daphne: DaphneProcess, path: str, user) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", daphne.port))
        key = "dGhlIHNhbXBsZSBub25jZQ=="
        request = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{daphne.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: {daphne.base}\r\nCookie: {cookie_for(user)}\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            assert chunk, "daphne closed the handshake"
            head += chunk
        assert head.startswith(b"HTTP/1.1 101"), head

    def ping(self) -> bool:
        """Send a ping frame; False once the server has closed the connection."""
        try:
            self.sock.sendall(masked_text_frame('{"type": "ping"}'))
            return True
        except OSError:
            return False

    def closed_by_server(self, timeout: float) -> bool:
        """Read (at last) what is there: True if the server closed or reset the connection
        within ``timeout`` seconds."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(1 << 20):
                pass
            return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        finally:
            self.sock.close()


def big_events(session, first_seq: int, count: int) -> list[dict]:
    now = datetime.now(UTC)
    return [
        journal.entry_payload(
            journal.Written(
                journal.Entry(session_id=session.pk, classroom_id=session.classroom_id,
                              kind="policy_set", message="m" * 3000),
                seq, now,
            )
        )
        for seq in range(first_seq, first_seq + count)
    ]  # fmt: skip


def test_a_client_that_never_reads_is_closed_and_the_server_memory_stays_bounded(daphne, world):
    session = world["session"]
    path = f"/ws/sessions/{session.pk}/"
    stalled = StalledClient(daphne, path, world["alice"])
    with open_socket(daphne, path, world["teacher"]) as reader:
        assert '"state"' in reader.recv(timeout=10)
        last_seen = {"seq": 0}

        def read_all() -> None:
            try:
                while True:
                    message = json.loads(reader.recv(timeout=60))
                    if message["type"] == "events":
                        last_seen["seq"] = message["events"][-1]["seq"]
            except (ConnectionClosed, TimeoutError):
                pass

        reading = threading.Thread(target=read_all, daemon=True)
        reading.start()
        time.sleep(0.5)
        rss_before = daphne.rss_bytes()
        group = broadcast.session_group(session.pk)
        per_message, messages = 20, 600  # about 80 MB of pushes per socket
        seq = 1

        async def push_all():
            nonlocal seq
            layer = get_channel_layer()
            for n in range(messages):
                events = big_events(session, seq, per_message)
                seq += per_message
                await layer.group_send(group, {"type": "journal.events", "events": events})
                if n % 4 == 3:
                    # Paced by the reading client, not by the clock: it is never more than four
                    # messages (well under the send-buffer limit) behind, however loaded the
                    # machine, so only the stalled client can cross the limit.
                    stalled.ping()
                    caught_up = seq - 1
                    deadline = time.monotonic() + 60
                    while last_seen["seq"] < caught_up and time.monotonic() < deadline:
                        await asyncio.sleep(0.01)

        async_to_sync(push_all)()
        last = seq - 1
        deadline = time.monotonic() + 120
        while last_seen["seq"] < last and time.monotonic() < deadline and reading.is_alive():
            time.sleep(0.2)
        rss_after = daphne.rss_bytes()
        assert last_seen["seq"] == last, "the reading client did not get every push"
        grown = rss_after - rss_before
        assert grown < 40 * 1024 * 1024, f"daphne grew by {grown / 2**20:.0f} MiB"
        assert stalled.closed_by_server(timeout=20), "daphne kept the stalled socket open"
