"""moto's S3 server as a process whose listener can go down and come back with its buckets: run by MotoServer.

`python moto_process.py PORT` serves moto's application (the one `python -m moto.server` serves) on
127.0.0.1:PORT, threaded, and obeys its stdin, one word a line, answering "ok" on stdout:
  down  stop listening and cut every open connection (clients see refused and reset connections);
  up    listen again on the same port.
moto keeps its buckets in this process's memory, so they outlive an outage; `python -m moto.server`
would have to be restarted and lose them. Runs as a script: it imports nothing from the tests.
"""
from __future__ import annotations

import os
import socket
import sys
import threading

from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import ThreadedWSGIServer


class CuttableServer(ThreadedWSGIServer):
    """A threaded WSGI server that remembers its connections, so that `cut()` can drop them all."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.connections = set()

    def get_request(self):
        conn, address = super().get_request()
        self.connections.add(conn)
        return conn, address

    def cut(self) -> None:
        """Stop accepting, close the listening socket, and shut down every connection still open."""
        self.shutdown()
        self.server_close()
        for conn in self.connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:  # closed already
                pass


def listen(port: int, app) -> CuttableServer:
    """Serve `app` on 127.0.0.1:`port` from a daemon thread."""
    server = CuttableServer("127.0.0.1", port, app)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def main(port: int) -> None:
    os.environ.setdefault("MOTO_PORT", str(port))  # what moto.server sets: moto builds some URLs from it
    app = DomainDispatcherApplication(create_backend_app)
    server = listen(port, app)
    print("ok", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "down":
            server.cut()
        elif command == "up":
            server = listen(port, app)
        else:
            sys.exit(f"moto_process: unknown command {command!r} (down, up)")
        print("ok", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
