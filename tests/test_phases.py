"""Where a compile's time goes (`irshard.core.phases`): each phase timed on
its own, nothing recorded unless asked, the pipeline's phases named."""

import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp

import irshard
from irshard.core import phases

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_phase_inside_another_is_taken_out_of_it():
    with phases.recording() as spent:
        with phases.phase("outer"):
            time.sleep(0.02)
            with phases.phase("inner"):
                time.sleep(0.1)
            with phases.phase("inner"):
                time.sleep(0.05)
    outer_cpu, outer_wall, outer_calls = spent["outer"]
    inner_cpu, inner_wall, inner_calls = spent["inner"]
    assert (outer_calls, inner_calls) == (1, 2)
    assert inner_wall >= 0.15
    assert 0.02 <= outer_wall < 0.1
    # Sleeping costs next to no CPU time.
    assert inner_cpu < 0.05 and outer_cpu < 0.05


def test_nothing_is_recorded_unless_asked():
    with phases.phase("alone"):
        pass
    with phases.recording() as spent:
        pass
    with phases.phase("after"):
        pass
    assert spent == {}


def test_a_compile_names_its_phases():
    def f(x, w):
        return jnp.tanh(x @ w).sum()

    x = jax.ShapeDtypeStruct((64, 128), jnp.float32)
    w = jax.ShapeDtypeStruct((128, 256), jnp.float32)
    with phases.recording() as spent:
        irshard.compile(f, x, w, mesh="x=4", shardings=("x,_", "_,_"))
    for name in ("JAX trace and lower", "XLA compile", "dumps read",
                 "HLO scanned", "collectives", "simulation", "memory peak"):
        assert name in spent, sorted(spent)
    assert spent["XLA compile"][0] > 0


def test_the_command_writes_its_phases_where_asked(tmp_path):
    record = tmp_path / "phases.tsv"
    done = subprocess.run(
        [sys.executable, "-m", "irshard", "compile",
         os.path.join(ROOT, "examples", "matmul.py"), "--mesh", "x=2,y=2"],
        capture_output=True, text=True,
        env=dict(os.environ, IRSHARD_PHASES=str(record)))
    assert done.returncode == 0, done.stderr
    names = {}
    for line in record.read_text().splitlines():
        name, cpu, wall = line.split("\t")
        names[name] = (float(cpu), float(wall))
    assert {"XLA compile", "rendering"} <= set(names)
    assert all(cpu >= 0 and wall >= 0 for cpu, wall in names.values())


def test_a_call_keeps_the_collector_off_the_objects_it_found():
    import gc

    from irshard.core import collector
    seen = []
    with collector.young_only():
        seen.append(gc.get_freeze_count())
        with collector.young_only():        # nested: nothing more frozen
            seen.append(gc.get_freeze_count())
    assert seen[0] > 0 and seen[1] == seen[0]
    assert gc.get_freeze_count() == 0       # handed back


def test_what_the_process_froze_itself_stays_frozen():
    import gc

    from irshard.core import collector
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector.young_only():
            with collector.young_only():
                pass
        assert gc.get_freeze_count() == frozen      # not handed back by us
    finally:
        gc.unfreeze()


def test_an_api_call_hands_every_object_back():
    import gc

    def f(x):
        return (x * 2).sum()

    irshard.compile(f, jax.ShapeDtypeStruct((8, 4), jnp.float32), mesh="x=2",
                    shardings=("x,_",))
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()


def test_sixteen_bit_floats_are_found_without_printing_the_module():
    from irshard.backend import shardy

    def inside(x, w):          # f32 in and out, bf16 only in between
        return (x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)) \
            .astype(jnp.float32).sum()

    def carried(x):            # f16 only as a loop's carried value
        return jax.lax.fori_loop(0, 3, lambda i, c: c * 2, x)

    def wide(x):
        return (x * 2).sum()

    f32 = jax.ShapeDtypeStruct((4, 4), jnp.float32)
    found = [shardy.sixteen_bit_floats(jax.jit(f).lower(*args)
                                       .compiler_ir("stablehlo"))
             for f, args in ((inside, (f32, f32)),
                             (carried, (jax.ShapeDtypeStruct((4,), jnp.float16),)),
                             (wide, (f32,)))]
    assert found == [{"bf16"}, {"f16"}, set()]


def test_a_phases_file_that_cannot_be_written_is_one_warning(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "irshard", "compile",
         os.path.join(ROOT, "examples", "matmul.py"), "--mesh", "x=2,y=2"],
        capture_output=True, text=True,
        env=dict(os.environ, IRSHARD_PHASES=str(tmp_path / "no" / "such" / "f")))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "irshard: warning: IRSHARD_PHASES: cannot write" in done.stderr


def test_phases_in_other_threads_keep_their_own_nesting():
    import threading

    def worker():
        with phases.phase("worker"):
            time.sleep(0.05)

    with phases.recording() as spent:
        with phases.phase("main"):
            thread = threading.Thread(target=worker)
            thread.start()
            time.sleep(0.02)
            thread.join()
    # The worker's time is not taken out of the main thread's phase.
    assert spent["main"][1] >= 0.045
    assert spent["worker"][1] >= 0.05
