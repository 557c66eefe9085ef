# Budgets hold a report to limits: the report is printed with each budget's
# value, and an exceeded one fails the command (exit 1) naming the breach.
# RUN: irshard compile %examples/mlp.py --mesh dp=2,tp=2 --grad --budget 'all-reduce@tp<=2' --budget 'bytes<=72KiB' | filecheck %s
# RUN: %exit 1 irshard compile %examples/mlp.py --mesh dp=2,tp=2 --grad --budget 'all-reduce@dp==0' --budget 'bytes<1KiB' --budget 'memory<=1MiB' > %t.out 2> %t.err
# RUN: filecheck %s --check-prefix=OVER < %t.out
# RUN: filecheck %s --check-prefix=ERR < %t.err
# RUN: irshard compile %examples/mlp.py --mesh dp=2,tp=2 --grad --budget 'all-reduce<=9' --format json | filecheck %s --check-prefix=JSON
# RUN: %exit 2 irshard compile %examples/mlp.py --mesh dp=2,tp=2 --budget 'gathers<=1' 2> %t.err
# RUN: filecheck %s --check-prefix=BAD < %t.err

# CHECK: budgets
# CHECK-NEXT: budget            value  result
# CHECK-NEXT: all-reduce@tp<=2      2  ok
# CHECK-NEXT: bytes<=72KiB  73728  ok

# OVER: all-reduce@dp==0  {{[1-9][0-9]*}}  EXCEEDED
# OVER-NEXT: bytes<1KiB  {{[0-9]+}}  EXCEEDED
# OVER-NEXT: memory<=1MiB  {{[0-9]+}}  ok
# ERR: irshard: error: 2 of 3 budgets exceeded
# ERR-NEXT: {{^}}  all-reduce@dp==0: {{[0-9]+ all-reduces?}} over dp
# ERR-NEXT: {{^}}  bytes<1KiB: {{[0-9]+}} bytes per run ({{.*}})

# JSON: "budgets": [
# JSON-NEXT: {"budget": "all-reduce<=9", "value": {{[0-9]+}}, "limit": 9, "passed": true}

# BAD: irshard: error: budget 'gathers<=1': unknown quantity 'gathers'; quantities are all-reduce, all-gather,
