"""Run the emulator: in-process on a free port (tests), or in the foreground (the CLI).

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from airflow_gpu_sched.emulator.app import create_app
from airflow_gpu_sched.emulator.backend import Backend
from airflow_gpu_sched.emulator.http_limits import HEAD_TIMEOUT_SECONDS, limited_protocol
from airflow_gpu_sched.emulator.scenario import Scenario
from airflow_gpu_sched.vertex.client.endpoints import is_loopback_host


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


class EmulatorServer:
    """The emulator on a real socket, served by uvicorn in a background thread.

    >>> with EmulatorServer() as emulator:
    ...     emulator.url   # 'http://127.0.0.1:PORT', the api_endpoint for our clients
    """

    def __init__(self, scenario: Scenario | None = None, host: str = "127.0.0.1", port: int = 0,
                 allow_remote: bool = False, ssl_certfile: str | None = None,
                 ssl_keyfile: str | None = None, control_token: str | None = None,
                 head_timeout: float = HEAD_TIMEOUT_SECONDS):
        """``allow_remote``: bind a non-loopback host and answer any Host/Origin (never with
        ``scenario.execute``); ``control_token``: what ``/emulator/v1/...`` requests must carry in
        the X-Emulator-Control-Token header (EmulatorControl(url, control_token=...)); ``head_timeout``:
        how long a request's head may take to arrive (emulator/http_limits.py)."""
        if not allow_remote and not is_loopback_host(host):
            raise ValueError(f"the emulator serves loopback only: it has no authentication, so anyone who can "
                             f"reach it can create and cancel its jobs and read their specs. Pass "
                             f"allow_remote=True (CLI: --allow-remote) to bind {host} anyway")
        if allow_remote and scenario is not None and scenario.execute:
            raise ValueError("--execute runs commands from job specs: loopback only, never with --allow-remote")
        self._ssl = {"ssl_certfile": ssl_certfile, "ssl_keyfile": ssl_keyfile} if ssl_certfile else {}
        self.backend = Backend(scenario)
        self.control_token = control_token
        self._protocol = limited_protocol(head_timeout=head_timeout)
        self._app = create_app(self.backend, allow_remote=allow_remote, control_token=control_token)
        self._socket = _bind(host, port)
        self.host, self.port = self._socket.getsockname()[:2]
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"{'https' if self._ssl else 'http'}://{shown}:{self.port}"
        self._server = self._uvicorn()
        self._thread: threading.Thread | None = None

    @property
    def traffic(self):
        """The in-process recorder (emulator/traffic.py): ``start(bodies=False)`` for long runs."""
        return self._app.state.traffic

    def _uvicorn(self) -> uvicorn.Server:
        config = uvicorn.Config(self._app, log_level="warning", access_log=False,
                                lifespan="off", timeout_keep_alive=30, http=self._protocol,
                                date_header=False, **self._ssl)  # emulated time, not uvicorn's: service_date.py
        return uvicorn.Server(config)

    def start(self) -> EmulatorServer:
        if self._socket.fileno() == -1:  # stopped before: serve again on the same port, same state
            self._socket = _bind(self.host, self.port)
            self._server = self._uvicorn()
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name="vertex-emulator", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the emulator did not start")
            time.sleep(0.01)
        return self

    def _end_processes(self) -> None:
        """--execute: the jobs' processes die with the emulator (their process groups)."""
        if self.backend.executor is not None:
            self.backend.executor.shutdown()

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._socket.close()
        self._end_processes()

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Foreground mode for the CLI: returns on Ctrl-C / SIGTERM."""
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._socket.close()
            self._end_processes()
