"""`backend.flops.product_flops`: the least matrix-product work of a
StableHLO module before partitioning, the search's bound. It counts
(2K - 1) flops per output element of a product with a contraction of K,
loops by their constant trip counts, a call once per call, the cheapest
branch of a conditional, and leaves out what XLA may remove: dead code,
a product repeated on the same operands, a loop of unknown trips."""

import jax
import jax.numpy as jnp

from irshard.backend.flops import product_flops


def flops_of(fn, *shapes):
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    return product_flops(jax.jit(fn).lower(*args).compiler_ir("stablehlo"))


def product(m, k, n, batch=1):
    return batch * m * n * (2 * k - 1)


def test_a_matmul_and_a_batched_einsum():
    assert flops_of(lambda a, b: a @ b, (4, 8), (8, 3)) == product(4, 8, 3)
    assert flops_of(lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
                    (5, 4, 8), (5, 8, 3)) == product(4, 8, 3, batch=5)
    # A product with nothing to contract is one multiply an element.
    assert flops_of(lambda a, b: jnp.einsum("i,j->ij", a, b), (4,), (3,)) == 12


def test_a_scan_counts_its_body_once_a_trip_and_its_gradient_too():
    def f(w, x):
        def body(c, wi):
            return jnp.tanh(c @ wi), None
        c, _ = jax.lax.scan(body, x, w)
        return c.sum()
    forward = 3 * product(4, 8, 8)
    assert flops_of(f, (3, 8, 8), (4, 8)) == forward
    # The gradient: the forward scan again, and in reverse for each trip
    # the cotangent of c (4x8 from 8) and of the weight (8x8 from 4).
    backward = 3 * (product(4, 8, 8) + product(8, 4, 8))
    assert flops_of(jax.grad(f), (3, 8, 8), (4, 8)) == forward + backward


def test_a_fori_loop_with_constant_bounds_and_one_without():
    def fixed(a, b):
        return jax.lax.fori_loop(2, 7, lambda i, c: c @ b, a)
    assert flops_of(fixed, (4, 4), (4, 4)) == 5 * product(4, 4, 4)

    def unknown(a, b, n):
        return jax.lax.fori_loop(0, n.astype(jnp.int32).sum(), lambda i, c: c @ b, a)
    # It may run no trip at all: nothing is counted.
    assert flops_of(unknown, (4, 4), (4, 4), (2,)) == 0

    def until(a, b):
        return jax.lax.while_loop(lambda c: c.sum() < 100.0, lambda c: c @ b, a)
    assert flops_of(until, (4, 4), (4, 4)) == 0


def test_dead_and_repeated_products_are_not_counted():
    def f(a, b):
        a @ b.T                          # traced, never read
        return (a @ b) + (a @ b)
    # jax.jit keeps both identical products in the IR; XLA merges them.
    assert flops_of(f, (4, 8), (8, 8)) == product(4, 8, 8)


def test_a_conditional_counts_its_cheapest_branch_and_a_call_its_callee():
    def f(p, a, b):
        return jax.lax.cond(p.sum() > 0, lambda: (a @ b) @ b, lambda: a @ b)
    assert flops_of(f, (1,), (4, 8), (8, 8)) == product(4, 8, 8)

    def g(a, b):
        inner = jax.jit(lambda x: x @ b)
        return inner(inner(a))
    assert flops_of(g, (4, 8), (8, 8)) == 2 * product(4, 8, 8)


def test_the_bound_is_below_the_simulated_step_of_every_sharding():
    """What makes it a bound: a program's products at the fastest rate the
    model knows, over all devices, never exceed the simulated step of any
    of its shardings (checked on the tutorial MLP's gradient step)."""
    import irshard
    from irshard.hardware import targets
    from irshard.timemodel import rates

    def loss(w1, w2, x):
        return jnp.mean(jnp.tanh(x @ w1) @ w2)
    step = jax.jit(jax.grad(loss, argnums=(0, 1)))
    shapes = [(256, 512), (512, 256), (128, 256)]
    total = flops_of(step, *shapes)
    # The forward product with w2 is dead: the mean is linear in it, so
    # its gradient never reads it.
    assert total == (product(128, 256, 512)                     # x @ w1
                     + product(512, 128, 256)                   # grad w2
                     + product(128, 256, 512)                   # into tanh
                     + product(256, 128, 512))                  # grad w1
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    fastest = rates.rates(targets.place(None, "cpu", None), 4).fastest_products()
    for rules in ([("w1", "_,data")], [("x", "data,_")], [("w2", "data,_")]):
        report = irshard.compile(step, *args, mesh="data=4", rules=rules)
        assert report.step is not None
        assert total / (4 * fastest) <= report.step.step_s, rules
