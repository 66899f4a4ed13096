"""The bounds an untrusted manifest is checked against (`checks`, `field_checks`, `reader`)."""
from __future__ import annotations

MAX_FIELDS = 64  # bits of the sample_fields column
MAX_HEAD_BYTES = 1 << 30
MAX_ROWS = 1 << 40        # samples, blocks or key bytes: far above any real pack, far below an overflow
MAX_VALUE = 1 << 62       # offsets, lengths and sizes: sums of two never overflow int64
