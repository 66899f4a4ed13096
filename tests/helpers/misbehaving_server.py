"""A real HTTP server on 127.0.0.1 that serves a directory (GET with one byte range, HEAD) and misbehaves on a
share of its requests, so that clients are tested against throttling, stalls and cut bodies, not mocks.

Every `every`-th request (counting GETs and HEADs) gets the next fault of `faults`, in turn:

- "throttle": HTTP 429 or 503 (alternately) with `Retry-After: <retry_after>` and no body;
- "stall": the connection is accepted and never answered (until the server closes);
- "cut": the headers and half the body, then the connection is closed (FIN);
- "reset": the headers and half the body, then the connection is reset (RST);
- "stall_body": the headers and half the body, then nothing more (until the server closes).

After `most` faults (None: never) it answers well. `done` counts the faults served, `in_flight_most` the
most requests it was answering at once; `delay` seconds are slept before each answer (to make requests
overlap); `answer(server, handler, fault, body)` replaces the way a request is answered.
"""
from __future__ import annotations

import http.server
import itertools
import re
import socket
import struct
import threading
from collections import Counter
from pathlib import Path

FAULTS = ("throttle", "stall", "cut", "reset", "stall_body")
_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class MisbehavingServer:
    """`root` served at `url` (http://127.0.0.1:PORT) by a threaded http.server until close()."""

    def __init__(self, root: str | Path, faults: tuple = (), every: int = 1, retry_after: int = 0, delay: float = 0.0,
                 most: int | None = None, answer=None):
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {FAULTS}")
        self.root, self.every, self.retry_after, self.delay = Path(root).resolve(), every, retry_after, delay
        self.done, self.in_flight_most, self.requests, self.most = Counter(), 0, 0, most
        self.answer = answer or answer_request
        self._faults = itertools.cycle(faults) if faults else None
        self._in_flight, self._lock, self.closing = 0, threading.Lock(), threading.Event()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(self))
        self.server.daemon_threads, self.server.block_on_close = True, False
        self.server.handle_error = lambda request, address: None  # a reset or stalled peer is the point here
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def next_fault(self) -> str | None:
        """The fault of this request (None: answer it well); counts requests and requests in flight."""
        with self._lock:
            self.requests += 1
            self._in_flight += 1
            self.in_flight_most = max(self.in_flight_most, self._in_flight)
            if self._faults is None or self.requests % self.every or sum(self.done.values()) == self.most:
                return None
            fault = next(self._faults)
            self.done[fault] += 1
            return fault

    def finished(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def close(self) -> None:
        """Stop serving; stalled handlers return and their connections close."""
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "MisbehavingServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _handler_class(owner: MisbehavingServer):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self._answer(body=True)

        def do_HEAD(self):
            self._answer(body=False)

        def _answer(self, body: bool):
            fault = owner.next_fault()
            try:
                owner.closing.wait(owner.delay)
                owner.answer(owner, self, fault, body)
            finally:
                owner.finished()

        def log_message(self, *args):
            pass

    return Handler


def answer_request(owner: MisbehavingServer, handler, fault: str | None, body: bool) -> None:
    """Answer one request as `fault` says (None: the file, or its range, or 404)."""
    if fault == "stall":
        owner.closing.wait()
        handler.close_connection = True
        return
    if fault == "throttle":
        status = 429 if owner.done["throttle"] % 2 else 503
        return _send(handler, status, b"", {"Retry-After": str(owner.retry_after)})
    path = owner.root / handler.path.split("?")[0].lstrip("/")
    if not path.is_file() or owner.root not in path.resolve().parents:
        return _send(handler, 404, b"", {})
    status, data, headers = _file_answer(path, handler.headers.get("Range"))
    if fault is None or not body or len(data) < 2:
        return _send(handler, status, data if body else b"", headers, length=len(data))
    _send(handler, status, data[:len(data) // 2], headers, length=len(data))
    _misbehave_mid_body(owner, handler, fault)


def _file_answer(path: Path, range_header: str | None) -> tuple:
    """(status, bytes, headers) for a GET of `path` with an optional `bytes=a-b` range."""
    data = path.read_bytes()
    got = _RANGE.match(range_header or "")
    if not got:
        return 200, data, {}
    first, last = int(got[1]), min(int(got[2] or len(data) - 1), len(data) - 1)
    return 206, data[first:last + 1], {"Content-Range": f"bytes {first}-{last}/{len(data)}"}


def _send(handler, status: int, data: bytes, headers: dict, length: int | None = None) -> None:
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(data) if length is None else length))
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)
    handler.wfile.flush()


def _misbehave_mid_body(owner: MisbehavingServer, handler, fault: str) -> None:
    """After half a body: close ("cut"), reset ("reset") or fall silent ("stall_body")."""
    handler.close_connection = True
    if fault == "stall_body":
        owner.closing.wait()
    elif fault == "reset":
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()
