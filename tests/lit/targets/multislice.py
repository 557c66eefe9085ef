# REQUIRES: libtpu
# Two v5e 2x2 slices: the leading axis dp spans the slices, so the weight
# gradients' all-reduce over dp goes over DCN (carried by the megascale
# runtime), the one over tp stays on ICI. DCN: 2 x 10us x (2-1) + 32768 B /
# 3.125e9 B/s = 30.5 us.
# RUN: irshard compile %examples/mlp.py --mesh dp=2,tp=4 --grad --target tpu-v5e:2x2,slices=2 | filecheck %s

# CHECK: mesh dp=2,tp=4 (8 tpu devices)  target tpu-v5e:2x2,slices=2
# CHECK: all-reduce  {{.*}}  tp  4  1  ici  {{[0-9.]+ us}}
# CHECK: all-reduce  send  f32[8,8,128]  32768  32768  dp  2  1  dcn  30.5 us
