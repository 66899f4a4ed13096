"""A real S3 server for tests: moto's server application in a process of its own on 127.0.0.1.

s3fs and botocore talk to it over HTTP exactly as to AWS or MinIO: signed requests, ranged GETs,
HEADs, real connection failures when it is stopped or down. Credentials are dummies (moto accepts any).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from helpers.http_server import free_port
from helpers.processes import stop_process

DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def missing_packages() -> str | None:
    """An install hint when moto's server, s3fs or boto3 is not importable, else None."""
    import importlib.util

    for module in ("moto.server", "flask", "s3fs", "boto3"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"{module} is not installed: pip install 's3fs>=2023.6' 'moto[server]>=5' boto3"
    return None


class MotoServer:
    """moto's S3 server on 127.0.0.1:`port` (`url`, the endpoint) until stop(); start() again reuses the port
    (with no buckets), `down()` is an outage after which the buckets are still there."""

    def __init__(self):
        self.port = free_port()
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "MotoServer":
        """Start the server (tests/helpers/moto_process.py) and return once it listens."""
        self._proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("moto_process.py")), str(self.port)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True, env={**os.environ, **DUMMY_CREDENTIALS})
        self._command(None)
        return self

    def _command(self, word: str | None) -> None:
        """Send `word` ("down", "up"; None sends nothing) to the server and wait for its "ok"."""
        if word is not None:
            self._proc.stdin.write(word + "\n")
            self._proc.stdin.flush()
        answer = self._proc.stdout.readline()
        if answer != "ok\n":
            status = self._proc.poll()
            self.stop()
            raise RuntimeError(f"moto server on port {self.port} answered {answer!r} to {word!r} (exit status {status})")

    def stop(self) -> None:
        stop_process(self._proc)
        if self._proc is not None:
            self._proc.stdin.close()
            self._proc.stdout.close()
        self._proc = None

    @contextlib.contextmanager
    def down(self):
        """An outage: inside the with-block nothing listens on the port and every open connection is cut;
        then the server listens again on the same port with its buckets as they were."""
        self._command("down")
        try:
            yield self
        finally:
            self._command("up")

    def client(self):
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.client("s3", endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def upload_folder(self, folder: Path, bucket: str, prefix: str, acl: str | None = None) -> str:
        """Create `bucket` and put every file under `folder` at s3://bucket/prefix/...; returns that URL.
        `acl="public-read"` makes the objects readable without credentials (s3fs's `anon=True`)."""
        client = self.client()
        client.create_bucket(Bucket=bucket)
        extra = None if acl is None else {"ACL": acl}
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder).as_posix()}", ExtraArgs=extra)
        return f"s3://{bucket}/{prefix}"

    def __enter__(self) -> "MotoServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
