"""What the blend tests share: whether a composition of rows can keep every full row within one sample of its share."""
from __future__ import annotations

import numpy as np


def within_one_possible(weights, totals, sizes, batch_size) -> bool:
    """Whether each source's total fits between its full rows' least and most counts within one sample of
    ``w * B`` (plus what the short row may take): without it no composition keeps every full row within one
    (a tiny epoch whose totals padding has skewed, e.g. totals [2, 41, 6] of w [0.027, 0.859, 0.114] in 7 rows
    of 7: source 1 needs at least 6 a row)."""
    full = int(np.sum(sizes == batch_size))
    rest = int(sizes.sum()) - full * batch_size
    least = np.maximum(np.ceil(weights * batch_size - 1 - 1e-9), 0)
    most = np.floor(weights * batch_size + 1 + 1e-9)
    return bool(np.all((full * least <= totals) & (totals <= full * most + rest)))
