"""A convolution's flops as XLA's cost analysis counts them, from its
operands' dimensions and its printed `window` and `dim_labels`.

Backends write batched matrix products as convolutions with dilated inputs
and padded windows (TPU's attention products look like
`window={size=16x8x4 stride=16x8x1 pad=15_15x7_7x3_3 lhs_dilate=15x7x1}`):
only the window positions that land on a real input element multiply, so
counting the whole window would count such a product millions of times
over.
"""

from __future__ import annotations

import math
import re
from typing import Sequence


def _window(text: str, key: str, rank: int, default: int) -> list[tuple[int, ...]]:
    m = re.search(rf"\b{key}=([\d_x-]+)", text)
    if m is None:
        return [(default,) * (2 if key == "pad" else 1)] * rank
    return [tuple(int(n) for n in part.split("_")) for part in m.group(1).split("x")]


def _taps(in_size: int, out_size: int, window: int, stride: int, pad_low: int,
          lhs_dilate: int, rhs_dilate: int) -> int:
    """(output position, window position) pairs along one spatial dimension
    that read a real input element, not padding or a dilation's hole."""
    dilated = (in_size - 1) * lhs_dilate + 1 if in_size else 0
    taps = 0
    for k in range(window):
        # Input positions o*stride + k*rhs_dilate - pad_low, o < out_size,
        # that fall on the dilated input and on a multiple of lhs_dilate.
        start = k * rhs_dilate - pad_low
        if lhs_dilate == 1 and stride > 0:
            first = max(0, -(start // stride) if start < 0 else 0)
            while first < out_size and start + first * stride < 0:
                first += 1
            last = min(out_size - 1, (dilated - 1 - start) // stride)
            taps += max(0, last - first + 1)
            continue
        for o in range(out_size):
            p = start + o * stride
            if 0 <= p < dilated and p % lhs_dilate == 0:
                taps += 1
    return taps


def convolution_flops(lhs: Sequence[int], rhs: Sequence[int], out: Sequence[int],
                      attrs: dict[str, str]) -> float:
    """A convolution's flops as XLA's cost analysis counts them: two per
    multiply-add that reads a real input element (a window over padding or
    over the holes of a dilated input costs nothing), so a batched product
    that a backend writes as a dilated convolution counts as the product."""
    labels = attrs.get("dim_labels", "")
    m = re.fullmatch(r"(\w+)_(\w+)->(\w+)", labels)
    if m is None or len(m.group(1)) != len(lhs) or len(m.group(2)) != len(rhs) \
            or len(m.group(3)) != len(out):
        return 2.0 * math.prod(out) * max(1, math.prod(rhs) // max(1, rhs[-1] if rhs else 1))
    lhs_labels, rhs_labels, out_labels = m.groups()
    spatial = sorted(c for c in lhs_labels if c.isdigit())
    window = attrs.get("window", "")
    rank = len(spatial)
    strides = _window(window, "stride", rank, 1)
    pads = _window(window, "pad", rank, 0)
    lhs_dilates = _window(window, "lhs_dilate", rank, 1)
    rhs_dilates = _window(window, "rhs_dilate", rank, 1)
    pairs = 1
    out_positions = 1
    for d, label in enumerate(spatial):
        out_size = out[out_labels.index(label)]
        out_positions *= out_size
        pairs *= _taps(lhs[lhs_labels.index(label)], out_size,
                       rhs[rhs_labels.index(label)], strides[d][0], pads[d][0],
                       lhs_dilates[d][0], rhs_dilates[d][0])
    groups = int(attrs.get("feature_group_count", "1") or 1)
    in_features = lhs[lhs_labels.index("f")] // max(1, groups)
    per_position = math.prod(out) // max(1, out_positions)
    return 2.0 * per_position * pairs * in_features
