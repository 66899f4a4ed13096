"""A real HTTP server for tests: Debian's nginx serving one directory on 127.0.0.1.

Tests of the fsspec path talk to a real server instead of a mock, so that range
requests, 206/416 answers, Content-Length and keep-alive behave as in
production. nginx serves static files with byte ranges enabled by default.

Everything nginx writes (config, pid, logs, temp dirs) lives in a private temp
directory, so it never touches /etc/nginx or /var/log and runs as any user.
"""
from __future__ import annotations

import contextlib
import http.client
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from helpers.processes import stop_process

_SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


_LOG_LINE = re.compile(r'"([A-Z]+ \S+ [^"]*)" (\d{3}) (\d+)')  # the combined format's request, status and bytes


def nginx_binary() -> str | None:
    """Path of the nginx executable, or None when it is not installed."""
    return shutil.which("nginx", path=_SEARCH_PATH)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _temp_path_lines(binary: str, tmp: Path) -> str:
    """temp-path directives for the http modules this nginx build has.

    Their compiled-in defaults point under /var/lib/nginx, which a non-root user
    cannot create; a directive for a module that is compiled out is a config error.
    """
    build = subprocess.run([binary, "-V"], capture_output=True, text=True).stderr
    lines = [f"client_body_temp_path {tmp}/client_body;"]
    for mod in ("proxy", "fastcgi", "uwsgi", "scgi"):
        if f"--without-http_{mod}_module" not in build:
            lines.append(f"{mod}_temp_path {tmp}/{mod};")
    return "\n    ".join(lines)


class NginxServer:
    """nginx serving `root` at `url` (http://127.0.0.1:PORT/) until stop()."""

    def __init__(self, root: str | os.PathLike, port: int | None = None):
        self.binary = nginx_binary()
        if self.binary is None:
            raise FileNotFoundError("nginx is not installed (apt-get install -y nginx-light)")
        self.root = Path(root).resolve()
        self.port = port
        self._fixed_port = port is not None
        self._tmp = Path(tempfile.mkdtemp(prefix="corgi-nginx-"))
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def requests(self) -> list:
        """Every request nginx has logged so far, as (method, path, status, body bytes sent), in order."""
        log = self._tmp / "access.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        return [(request.split(" ")[0], request.split(" ")[1], int(status), int(sent))
                for request, status, sent in (_LOG_LINE.search(line).groups() for line in lines)]

    def put(self, relpath: str, data: bytes) -> str:
        """Write `data` under the served directory and return its URL."""
        path = self.root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return self.url + relpath

    def _write_config(self) -> Path:
        user = "user root;" if os.geteuid() == 0 else ""  # workers must read root-owned tmp dirs
        conf = self._tmp / "nginx.conf"
        conf.write_text(f"""
{user}
daemon off;
master_process on;
worker_processes 1;
pid {self._tmp}/nginx.pid;
error_log {self._tmp}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log {self._tmp}/access.log;
    {_temp_path_lines(self.binary, self._tmp)}
    default_type application/octet-stream;
    sendfile on;
    server {{
        listen 127.0.0.1:{self.port};
        root {self.root};
        location / {{ }}
    }}
}}
""")
        return conf

    def start(self, timeout: float = 10.0) -> "NginxServer":
        """Start nginx and return once it answers HTTP; retries a first start on a port race."""
        for _ in range(1 if self._fixed_port else 3):
            if not self._fixed_port:
                self.port = free_port()
            conf = self._write_config()
            self._proc = subprocess.Popen(
                [self.binary, "-p", str(self._tmp), "-c", str(conf), "-e", str(self._tmp / "error.log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_ready(timeout):
                self._fixed_port = True  # a restart after stop() reuses the port
                return self
        log = (self._tmp / "error.log").read_text(errors="replace") if (self._tmp / "error.log").exists() else ""
        self.stop()
        raise RuntimeError(f"nginx did not start on 127.0.0.1:{self.port}:\n{log}")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False  # exited: config error or port taken
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                conn.request("HEAD", "/")
                conn.getresponse()
                conn.close()
                return True
            except OSError:
                time.sleep(0.02)
        return False

    def stop(self) -> None:
        """Fast shutdown (SIGTERM), waiting for the master and its worker to exit."""
        stop_process(self._proc)
        self._proc = None

    @contextlib.contextmanager
    def down(self):
        """An outage: the server is stopped inside the with-block and started again, on the
        same port, when it ends, whatever happens (tests share one session-wide server)."""
        self.stop()
        try:
            yield self
        finally:
            self.start()

    def close(self) -> None:
        """Stop the server and remove its private temp directory."""
        self.stop()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "NginxServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
