"""A real S3 server for tests: moto's standalone server (`python -m moto.server`) on 127.0.0.1.

s3fs and botocore talk to it over HTTP exactly as to AWS or MinIO: signed requests, ranged GETs,
HEADs, real connection failures when it is stopped. Credentials are dummies (moto accepts any).
"""
from __future__ import annotations

import http.client
import os
import subprocess
import sys
import time
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
    """moto's S3 server on 127.0.0.1:`port` (`url`, the endpoint) until stop(); start() again reuses the port."""

    def __init__(self):
        self.port = free_port()
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "MotoServer":
        """Start the server and return once it answers HTTP."""
        self._proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      env={**os.environ, **DUMMY_CREDENTIALS})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"moto.server exited with status {self._proc.returncode} on port {self.port}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                conn.request("GET", "/")
                conn.getresponse().read()
                conn.close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto.server did not answer on port {self.port} in {timeout} s")

    def stop(self) -> None:
        stop_process(self._proc)
        self._proc = None

    def client(self):
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.client("s3", endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def upload_folder(self, folder: Path, bucket: str, prefix: str) -> str:
        """Create `bucket` and put every file under `folder` at s3://bucket/prefix/...; returns that URL."""
        client = self.client()
        client.create_bucket(Bucket=bucket)
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder).as_posix()}")
        return f"s3://{bucket}/{prefix}"

    def __enter__(self) -> "MotoServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
