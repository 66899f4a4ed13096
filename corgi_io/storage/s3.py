"""S3 through s3fs, fitted to corgi-io's retries: botocore's own retries off, its connection errors
transient, and a hint when a connection failed with no endpoint configured.

Neither s3fs nor botocore is imported here: botocore's exceptions are looked up in `sys.modules`,
where they are whenever s3fs has raised one.
"""
from __future__ import annotations

import sys
from urllib.parse import urlsplit

S3_SCHEMES = ("s3", "s3a")
ONE_ATTEMPT = {"total_max_attempts": 1}
NO_ENDPOINT_HINT = ("no S3 endpoint is configured, so this went to AWS: for MinIO, Ceph or another S3-compatible "
                    "store set the storage option endpoint_url (corgi: --storage-option endpoint_url=URL) or "
                    "AWS_ENDPOINT_URL; see docs/operations.md")


def is_s3(url: str) -> bool:
    return urlsplit(url).scheme in S3_SCHEMES


def s3_options(options: dict) -> dict:
    """`options` with botocore's retries off (one attempt per call), unless they, or the fsspec
    configuration, already set `config_kwargs["retries"]`.

    corgi-io retries every call within its own budget (`retry_seconds`). botocore's default "legacy"
    mode would retry each call 4 more times inside one of those attempts, with backoff: 12.6 s for
    one lookup of a refused port, against the 2 s a lookup is given, and an attempt count that lies.
    """
    import fsspec.config

    config = {**fsspec.config.conf.get("s3", {}), **options}.get("config_kwargs") or {}
    if "retries" in config:
        return options
    return {**options, "config_kwargs": {**config, "retries": dict(ONE_ATTEMPT)}}


def is_connection_error(exc: BaseException) -> bool:
    """True for botocore's network failures (refused, DNS, timeouts, a cut body): a retry may help.

    S3's HTTP answers are not among them: s3fs turns those into OSErrors (FileNotFoundError,
    PermissionError, ...) before they reach corgi-io.
    """
    exceptions = sys.modules.get("botocore.exceptions")
    return exceptions is not None and isinstance(exc, (exceptions.ConnectionError, exceptions.HTTPClientError))


def endpoint_hint(fs, exc: BaseException) -> str:
    """NO_ENDPOINT_HINT when `exc` is a connection failure of the s3fs `fs` to an AWS host and nothing
    set an endpoint (storage options, the fsspec configuration, the environment or ~/.aws/config)."""
    url = (getattr(exc, "kwargs", None) or {}).get("endpoint_url") or ""
    if not is_connection_error(exc) or not (urlsplit(url).hostname or "").endswith(".amazonaws.com"):
        return ""
    configured = getattr(fs, "endpoint_url", None) or (getattr(fs, "client_kwargs", None) or {}).get("endpoint_url")
    return "" if configured else NO_ENDPOINT_HINT
