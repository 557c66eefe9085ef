"""`irshard search` over MaxText's own knobs for published TPU rows: where
the published configuration ranks, and what the search would run instead.

For each row (`--rows v5p/32B/1,v4/22B/1`: generation, model, slices) this
builds the row's config as `benchmarks/tpu_published.py` does (the 2023
script it was measured with, by MaxText 0.2.5's names, with its libtpu
flags), then searches MaxText 0.2.5's train step
(`benchmarks/programs/maxtext_factory.py`) over

    ici_fsdp_parallelism x ici_tensor_parallelism x remat_policy
    x per_device_batch_size

for the row's slice (`--mesh own`: each candidate's mesh and shardings are
MaxText's own), ranked by the simulated step per example
(`--per per_device_batch_size`) among those that fit the chip's HBM. It
prints the table irshard prints and, for the row:

  - where the published configuration ranks among the candidates;
  - the best candidate's predicted step and MFU against the published
    configuration's predicted and published MFU (MFU as the row's table
    counted TFLOPs: `tpu_published.published_count`);
  - how many candidates did not fit, were invalid (MaxText rejects the
    parallelism for the slice), or were pruned.

Nothing of the time model is changed for this. It runs in the environment
of `benchmarks/maxtext.py` (Python >= 3.12):

    .venv-maxtext/bin/python benchmarks/maxtext_search.py [--rows v5p/32B/1]
        [--knob remat_policy=minimal,full] [--jobs N | --ray local] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FACTORY = os.path.join(HERE, "programs", "maxtext_factory.py")
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(HERE, "programs"))

# Each row's searched values; the published ones among them.
SPACES = {
    "v5p/32B": {"ici_fsdp_parallelism": (16, 32, 64),
                "ici_tensor_parallelism": (1, 2, 4),
                "remat_policy": ("minimal", "full"),
                "per_device_batch_size": (4, 8, 16)},
    "v4/22B": {"ici_fsdp_parallelism": (16, 32, 64),
               "ici_tensor_parallelism": (1, 2, 4),
               "remat_policy": ("minimal", "full"),
               "per_device_batch_size": (8, 16, 24)},
}
KNOBS = ("ici_fsdp_parallelism", "ici_tensor_parallelism", "remat_policy",
         "per_device_batch_size")


def _tpu_published():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "tpu_published", os.path.join(HERE, "tpu_published.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def published_knobs(settings: list[str], chips: int) -> dict:
    """The row's own values of the four knobs (a parallelism of -1 filled
    in as MaxText fills it: the chips the others leave)."""
    given = dict(s.split("=", 1) for s in settings)
    knobs = {k: given[k] for k in KNOBS}
    ici = ("ici_data_parallelism", "ici_fsdp_parallelism",
           "ici_sequence_parallelism", "ici_tensor_parallelism")
    known = 1
    for k in ici:
        if int(given.get(k, 1)) != -1:
            known *= int(given.get(k, 1))
    for k in ("ici_fsdp_parallelism", "ici_tensor_parallelism"):
        knobs[k] = int(knobs[k]) if int(knobs[k]) != -1 else chips // known
    knobs["per_device_batch_size"] = int(knobs["per_device_batch_size"])
    return knobs


def environment(settings: list[str], flags: str, slice_name: str, slices: int) -> dict:
    base = [s for s in settings if s.split("=", 1)[0] not in KNOBS]
    base += [f"compile_topology={slice_name}", f"compile_topology_num_slices={slices}"]
    return dict(os.environ, MAXTEXT_BASE=" ".join(base), LIBTPU_INIT_ARGS=flags,
                JAX_PLATFORMS="cpu", ALLOW_MULTIPLE_LIBTPU_LOAD="1")


def figures(env: dict, batch: int) -> dict:
    done = subprocess.run([sys.executable, FACTORY, "--figures",
                           f"per_device_batch_size={batch}"], env=env,
                          capture_output=True, text=True, cwd=os.path.dirname(FACTORY))
    if done.returncode != 0:
        raise SystemExit(f"maxtext_factory.py --figures failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def search(env: dict, target: str, space: dict, compiler: list[str], out: str,
           budget: str, cache: str, fmt: str) -> tuple[float, subprocess.CompletedProcess]:
    # The factory by its path in the repository (the search runs there):
    # what the reproduce line shows.
    argv = [sys.executable, "-m", "irshard", "search", os.path.relpath(FACTORY, ROOT),
            "--factory", "make",
            *[a for k, vs in space.items()
              for a in ("--knob", f"{k}={','.join(map(str, vs))}")],
            "--per", "per_device_batch_size", "--mesh", "own", "--target", target,
            "--cache-dir", cache, "--budget-time", budget, *compiler,
            "--format", fmt, "-o", out]
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
    return time.perf_counter() - start, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="v5p/32B/1,v4/22B/1",
                        help="generation/model/slices, comma separated")
    parser.add_argument("--knob", action="append", default=[], metavar="K=V1,V2",
                        help="replace a knob's searched values")
    parser.add_argument("--jobs", default="1")
    parser.add_argument("--ray", default=None, help="search on a Ray cluster")
    parser.add_argument("--budget-time", default="3h")
    parser.add_argument("--json", default=None, help="also write the results here")
    options = parser.parse_args()
    published = _tpu_published()
    results = []
    for row_name in options.rows.split(","):
        generation, model, slices = row_name.split("/")
        slices = int(slices)
        rows = [r for r in published.published(generation)
                if r["model"].upper() == model.upper() and r["slices"] == slices]
        if not rows:
            raise SystemExit(f"no published row {row_name}")
        row = rows[0]
        settings, flags = published.published_config(generation, row["model"], slices)
        target = published.target_of(row["slice"], slices)
        from irshard.hardware import targets
        place = targets.place(target)
        chips = place.target.num_devices // slices
        own = published_knobs(settings, chips)
        space = {k: tuple(v) for k, v in SPACES[f"{generation}/{row['model']}"].items()}
        for item in options.knob:
            key, values = item.split("=", 1)
            space[key] = tuple(int(v) if v.lstrip("-").isdigit() else v
                               for v in values.split(","))
        for k, v in own.items():
            if v not in space[k]:
                space[k] = tuple(space[k]) + (v,)
        env = environment(settings, flags, row["slice"], slices)
        compiler = ["--ray", options.ray] if options.ray else ["--jobs", options.jobs]
        with tempfile.TemporaryDirectory(prefix="irshard-maxtext-search-") as work:
            out, cache = os.path.join(work, "search.json"), os.path.join(work, "cache")
            seconds, done = search(env, target, space, compiler, out,
                                   options.budget_time, cache, "json")
            if done.returncode != 0:
                print(f"{row_name}: the search failed:\n{done.stderr[-3000:]}")
                continue
            with open(out) as f:
                data = json.load(f)
            # The same search as text, every candidate from the cache the
            # first filled.
            _, shown = search(env, target, space, compiler, out + ".txt",
                              options.budget_time, cache, "text")
            print(f"irshard search, {row_name}:")
            with open(out + ".txt") as f:
                print(f.read() if shown.returncode == 0 else shown.stderr[-3000:])
        peak = place.profile.peak_flops
        by_batch = {b: figures(env, b) for b in space["per_device_batch_size"]}

        def mfu(entry: dict) -> float | None:
            if entry.get("step_s") is None:
                return None
            shaped = dict(by_batch[entry["knobs"]["per_device_batch_size"]])
            count = published.published_count(generation, shaped)
            return count * 1e12 / entry["step_s"] / peak

        ranked = [e for e in data["candidates"] if e["rank"] is not None]
        mine = [e for e in ranked if e["origin"] != "move"
                and all(e["knobs"].get(k) == v for k, v in own.items())]
        winner = data["winner"]
        counts = data["counts"]
        unfit = sum(1 for e in ranked if e.get("fits") is False)
        result = {
            "row": row_name, "target": target, "published_knobs": own,
            "space": {k: list(v) for k, v in space.items()},
            "published_mfu": row["mfu"], "published_tflops": row["tflops"],
            "counts": counts, "did_not_fit": unfit, "wall_s": seconds,
            "candidates": len(data["candidates"]),
            "published_rank": mine[0]["rank"] if mine else None,
            "published_step_s": mine[0]["step_s"] if mine else None,
            "published_predicted_mfu": mfu(mine[0]) if mine else None,
            "winner": winner and {"label": winner["label"], "knobs": winner["knobs"],
                                  "rules": winner["rules"],
                                  "step_s": winner["step_s"], "mfu": mfu(winner),
                                  "memory_bytes": winner["memory_bytes"],
                                  "step_per_example_s": winner.get("step_per_unit_s")},
            "table": [{"rank": e["rank"], "label": e["label"], "step_s": e["step_s"],
                       "per_example_s": e.get("step_per_unit_s"), "mfu": mfu(e),
                       "memory_bytes": e["memory_bytes"], "fits": e["fits"],
                       "origin": e["origin"]} for e in ranked],
        }
        results.append(result)
        _print(result)
    if options.json:
        with open(options.json, "w") as f:
            json.dump(results, f, indent=1)


def _print(r: dict) -> None:
    print(f"\n{r['row']} on {r['target']}: {r['candidates']} candidates "
          f"({', '.join(f'{n} {k}' for k, n in sorted(r['counts'].items()))}; "
          f"{r['did_not_fit']} compiled but do not fit), searched in {r['wall_s']:.0f} s")
    print(f"  {'rank':>4}  {'step':>9} {'per example':>11} {'MFU':>6} "
          f"{'memory':>10} fits  candidate")
    for e in r["table"]:
        mfu = f"{e['mfu']:.1%}" if e["mfu"] is not None else "-"
        print(f"  {e['rank']:>4}  {e['step_s'] * 1e3:8.0f}ms "
              f"{e['per_example_s'] * 1e3:9.0f}ms {mfu:>6} "
              f"{e['memory_bytes'] / 2**30:8.1f}GiB {'yes' if e['fits'] else 'no ':4} "
              f"{e['label']}")
    knobs = " ".join(f"{k}={v}" for k, v in r["published_knobs"].items())
    if r["published_rank"] is None:
        print(f"  published ({knobs}): not ranked")
    else:
        print(f"  published ({knobs}): rank {r['published_rank']} of "
              f"{len(r['table'])}, predicted step {r['published_step_s'] * 1e3:.0f} ms, "
              f"MFU {r['published_predicted_mfu']:.1%} predicted, "
              f"{r['published_mfu']:.1%} measured")
    w = r["winner"]
    if w:
        print(f"  best: {w['label']}: step {w['step_s'] * 1e3:.0f} ms, "
              f"MFU {w['mfu']:.1%} predicted (published configuration: "
              f"{r['published_mfu']:.1%} measured)")


if __name__ == "__main__":
    main()
