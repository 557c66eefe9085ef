# REQUIRES: libtpu
# The 12-layer transformer's gradient on a v5p 2x2x2 slice: its tensor- and
# data-parallel all-reduces run inside the scanned layers (12 times), over
# ICI, and the step fits in a v5p's 95 GiB of HBM.
# RUN: irshard compile %S/../../../benchmarks/transformer.py --mesh dp=2,tp=4 --grad --target tpu-v5p:2x2x2 | filecheck %s

# CHECK: mesh dp=2,tp=4 (8 tpu devices)  target tpu-v5p:2x2x2  stage optimized
# CHECK: all-reduce {{.*}}  tp  4  12  ici  {{[0-9.]+ us}}  transformer.py:{{[0-9]+}} (_block)
# CHECK: all-reduce {{.*}}  dp  2  1  ici  {{[0-9.]+ us}}  transformer.py:{{[0-9]+}} (loss)
# CHECK: time per run: {{[0-9.]+ [mu]s}}, from the tpu-v5p profile
# CHECK: fits in 95.0 GiB HBM
