"""The long-running processes of the lab, defined once.

The run command (scripts/run_lab.py), the integration tests and docker-compose.yml all start
the same commands; tests/test_compose.py checks the compose file against these lists.
"""

from __future__ import annotations

import socket

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_WORKER_CONCURRENCY = 128
ASGI_APP = "lab_project.asgi:application"


def daphne_cmd(host: str = DEFAULT_HOST, port: int | str = DEFAULT_PORT) -> list[str]:
    """The web process: daphne serving HTTP and websockets.

    ``--no-server-name``: no ``Server`` header. Daphne sends ``Server: daphne`` on every HTTP
    response and websocket handshake by default (its ``server_name``), which tells a scanner
    what to try; with an empty name it sends none.
    """
    return ["daphne", "--no-server-name", "-b", str(host), "-p", str(port), ASGI_APP]


def daphne_fd_cmd(fd: int) -> list[str]:
    """A web process serving on a listening socket it inherits (file descriptor ``fd``).

    Several of them on one socket share one port, the kernel handing each new connection to
    one of them (``LAB_WEB_PROCESSES``): a web process runs Django's requests and the pushes
    under one interpreter lock, so a class-wide click on Run burst queues behind one lock;
    with a core to spare per process, more processes take more of it at once (docs/scaling.md
    has the trade on two cores). Pages
    and their pushes need nothing more: every web process subscribes to the groups of the
    pages it holds.
    """
    return ["daphne", "--no-server-name", "--fd", str(fd), ASGI_APP]


def shared_listener(host: str, port: int) -> socket.socket:
    """The listening socket the ``daphne_fd_cmd`` processes inherit (pass its ``fileno()``
    in ``pass_fds``)."""
    listener = socket.create_server((host, port), backlog=1024)
    listener.set_inheritable(True)
    return listener


def worker_cmd(concurrency: int | str = DEFAULT_WORKER_CONCURRENCY) -> list[str]:
    """The Celery worker: a thread pool, because bursts spend their time sleeping."""
    return [
        "celery", "-A", "lab_project", "worker",
        "--pool", "threads", "--concurrency", str(concurrency),
        "--loglevel", "INFO",
    ]  # fmt: skip


DAPHNE_CMD = daphne_cmd()
WORKER_CMD = worker_cmd()
