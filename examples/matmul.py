"""An 8x8 matrix product on a 2x2 mesh.

Both operands are sharded in both dimensions: rows over `x`, columns over
`y`. The contraction dimension of `a` (its columns) is split over `y` and that
of `b` (its rows) over `x`, so the partitioner must move data before the
per-device products can be summed.

    irshard compile examples/matmul.py --mesh x=2,y=2
"""


def matmul(a: "f32[8@x,8@y]", b: "f32[8@x,8@y]"):
    return a @ b
