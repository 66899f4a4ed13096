"""A TCP proxy on 127.0.0.1 that puts a link's latency (and optionally its bandwidth) in front of any host:port.

Every response of every request pays `delay` seconds before its first byte, keep-alive included: each
connection alternates between the client's turn and the server's, and the first burst of server bytes
that follows a burst of client bytes is held `delay` s (HTTP/1.1 without pipelining, as urllib3, aiohttp
and botocore speak it).  With `rate` (bytes/s), the bytes sent to clients share one token bucket, a
link of that bandwidth.  `requests` counts the client turns: the requests made through the proxy.

    python latency_proxy.py UPSTREAM_PORT DELAY_MS [RATE_BYTES_PER_S]

serves in a process of its own (so that the proxy's CPU time is not the measured process's), prints
its port, then answers one word a line on stdin: "requests" -> the requests since the last ask; it exits when
its stdin closes.
`LatencyProxy` starts and stops that process.  Stdlib only; imports nothing from the tests.
"""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

CHUNK = 1 << 16


class Link:
    """A token bucket of `rate` bytes/s shared by every connection (None: unlimited)."""

    def __init__(self, rate: float | None):
        self.rate, self.free_at = rate, 0.0

    async def send(self, nbytes: int) -> None:
        """Wait until `nbytes` more fit the link's bandwidth."""
        if not self.rate:
            return
        now = time.monotonic()
        self.free_at = max(now, self.free_at) + nbytes / self.rate
        await asyncio.sleep(self.free_at - now)


class Proxy:
    """The proxy's event-loop side: accept on 127.0.0.1, one upstream connection per client connection."""

    def __init__(self, upstream: tuple, delay: float, rate: float | None = None):
        self.upstream, self.delay, self.link = upstream, delay, Link(rate)
        self.requests = 0
        self.connections = {}  # task -> its writers: held here, so none is collected while it waits

    async def serve(self, port: int = 0) -> asyncio.base_events.Server:
        return await asyncio.start_server(self._connection, "127.0.0.1", port)

    async def _connection(self, client_r, client_w) -> None:
        task = asyncio.current_task()
        self.connections[task] = [client_w]
        try:
            await self._relay(client_r, client_w, self.connections[task])
        finally:
            del self.connections[task]

    async def _relay(self, client_r, client_w, writers: list) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        writers.append(server_w)
        turn = {"asked": False}  # True from a client burst until the server's answer starts
        await asyncio.gather(self._ask(client_r, server_w, turn), self._answer(server_r, client_w, turn),
                             return_exceptions=True)
        for writer in (client_w, server_w):
            writer.close()

    async def _ask(self, reader, writer, turn) -> None:
        """Client bytes to the server; the first of a burst opens a request."""
        while data := await reader.read(CHUNK):
            if not turn["asked"]:
                turn["asked"] = True
                self.requests += 1
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    async def _answer(self, reader, writer, turn) -> None:
        """Server bytes to the client: the first of each answer after `delay`, all of them at the link's rate."""
        while data := await reader.read(CHUNK):
            if turn["asked"]:
                turn["asked"] = False
                await asyncio.sleep(self.delay)
            await self.link.send(len(data))
            writer.write(data)
            await writer.drain()
        writer.close()

    async def close(self) -> None:
        """End every open connection: its sockets closed, its task finished (within a second)."""
        tasks = list(self.connections)
        for writers in self.connections.values():
            for writer in writers:
                writer.close()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)


async def _main(upstream_port: int, delay: float, rate: float | None) -> None:
    proxy = Proxy(("127.0.0.1", upstream_port), delay, rate)
    server = await proxy.serve()
    print(server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        if line.strip() != "requests":
            sys.exit(f"latency_proxy: unknown command {line.strip()!r} (requests)")
        print(proxy.requests, flush=True)
        proxy.requests = 0
    server.close()
    await proxy.close()


class LatencyProxy:
    """The proxy in its own process in front of 127.0.0.1:`upstream_port`: `url` (http://127.0.0.1:PORT),
    `requests()` (made through it since the last call), `stop()`; a context manager."""

    def __init__(self, upstream_port: int, delay: float, rate: float | None = None):
        command = [sys.executable, str(Path(__file__).resolve()), str(upstream_port), str(delay * 1000)]
        self._proc = subprocess.Popen(command + ([str(rate)] if rate else []), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
        answer = self._proc.stdout.readline()
        if not answer.strip().isdigit():
            self.stop()
            raise RuntimeError(f"latency proxy to port {upstream_port} did not start: {answer!r}")
        self.port = int(answer)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self) -> int:
        """Requests made through the proxy since the last call (or its start)."""
        self._proc.stdin.write("requests\n")
        self._proc.stdin.flush()
        return int(self._proc.stdout.readline())

    def stop(self) -> None:
        """Close its stdin, so that it ends its event loop and exits; terminate it if it has not in 5 s."""
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.terminate()
            self._proc.wait()
        self._proc.stdout.close()

    def __enter__(self) -> "LatencyProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    asyncio.run(_main(int(sys.argv[1]), float(sys.argv[2]) / 1000, float(sys.argv[3]) if len(sys.argv) > 3 else None))
