# --grad compiles the gradient with respect to every floating-point input:
# the MLP's data-parallel weight gradients are summed with all-reduces over
# dp, the tensor-parallel activations over tp.
# RUN: irshard compile %examples/mlp.py --mesh dp=2,tp=2 --grad | filecheck %s

# CHECK: outputs
# CHECK-NEXT: #  name      type         sharding  per device
# CHECK-NEXT: 0  grad(w1)  f32[64,256]  _,tp      f32[64,128]
# CHECK-NEXT: 1  grad(w2)  f32[256,64]  tp,_      f32[128,64]
# CHECK-NEXT: 2  grad(x)   f32[32,64]   dp,_      f32[16,64]
# CHECK-NEXT: 3  grad(y)   f32[32,64]   dp,_      f32[16,64]
# CHECK: all-reduce {{.*}} tp  2  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  mlp.py:21 (loss)
# CHECK: all-reduce (2 combined) {{.*}} (f32[128,64], f32[64,128])  65536  65536  dp  2  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  mlp.py:20 (loss)
