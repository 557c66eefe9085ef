# Targets that do not parse or do not fit the mesh, and running what cannot
# run here, are usage errors naming what would be accepted.
# RUN: %exit 2 irshard compile %examples/matmul.py --mesh x=2,y=2 --target tpu-v9:2x2 2> %t.err
# RUN: filecheck %s --check-prefix=CHIP < %t.err
# RUN: %exit 2 irshard compile %examples/matmul.py --mesh x=2,y=2 --target tpu-v5p:2x2 2> %t.err
# RUN: filecheck %s --check-prefix=DIMS < %t.err
# RUN: %exit 2 irshard compile %examples/matmul.py --mesh x=2,y=2 --target tpu-v5e:4x4 2> %t.err
# RUN: filecheck %s --check-prefix=COUNT < %t.err
# RUN: %exit 2 irshard compile %examples/matmul.py --mesh x=2,y=2 --target gpu-h100 2> %t.err
# RUN: filecheck %s --check-prefix=SHAPE < %t.err

# CHIP: irshard: error: --target 'tpu-v9:2x2': unknown TPU 'v9'; TPUs are v4, v5e, v5p, v6e
# DIMS: irshard: error: --target 'tpu-v5p:2x2': a v5p slice is a 3-D torus; give NxNxN
# COUNT: irshard: error: --mesh x=2,y=2 has 4 devices but --target tpu-v5e:4x4 has 16; give a mesh of 16 devices
# SHAPE: irshard: error: --target 'gpu-h100': expected cpu, tpu-v4|v5e|v5p|v6e:TOPOLOGY[,slices=N]
