# `--verify`: the cause `--explain` names is confirmed by a recompile
# without it. The constraint on line 16 asks for the matmul's columns
# sharded while x's rows are: the all-gather is the constraint's, not the
# matmul's. `--group-by cause` sums the collectives by it; JSON carries
# the cause, its side and its verdict.
# RUN: irshard compile %S/../programs/puzzles/constraint.py --fn step --args args --mesh x=4 --shard x=x,_ --verify --group-by cause | filecheck %s
# RUN: irshard compile %S/../programs/puzzles/constraint.py --fn step --args args --mesh x=4 --shard x=x,_ --verify --format json | filecheck %s --check-prefix=JSON

# CHECK-LABEL: by cause (1 causes)
# CHECK-NEXT: cause  {{ +}}collectives  kinds  {{ +}}bytes per run  time per run  of collective time
# CHECK-NEXT: constraint constraint.py:16  1  all-gather  32768  {{[0-9.]+ us}}  100%
# CHECK-LABEL: why
# CHECK-NEXT: all-gather  constraint.py:14 (step)
# CHECK-NEXT: reads input x sharded x,_; dot_general at constraint.py:14 (step) gets it replicated
# CHECK-NEXT: x: input x (its sharding from --shard x=x,_) -> the constraint at constraint.py:16
# CHECK-NEXT: cause: the constraint at constraint.py:16, confirmed: without it, the all-gather at constraint.py:14 goes
# CHECK: --verify: 1 recompile, each without a decision named as a cause (or all of a collective's at once)

# JSON: "cause": {
# JSON-NEXT: "kind": "constraint",
# JSON-NEXT: "name": "constraint_0",
# JSON-NEXT: "source": {
# JSON-NEXT: "file": "constraint.py",
# JSON-NEXT: "line": 16,
# JSON: "side": "needed",
# JSON-NEXT: "verdict": "confirmed",
# JSON-NEXT: "seen": "without it, the all-gather at constraint.py:14 goes"
