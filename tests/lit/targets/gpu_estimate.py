# Without GPUs, a GPU target is estimated from the partitioned HLO (the
# program's own bf16): devices fill a node first, so tp (4 GPUs in a node)
# talks over NVLink and dp (across the 2 nodes) over InfiniBand.
#   NVLink, all-reduce of 32768 B over 4: 8.4us + 2 x 3.4us x 3 + 49152 B / 4.5e11 B/s = 28.9 us
#   InfiniBand, all-reduce of 524288 B over 2: 8.4us + 2 x 14us x 1 + 524288 B / 5e10 B/s = 46.9 us
# RUN: irshard compile %examples/mlp.py --mesh dp=2,tp=4 --grad --target gpu-h100:2x4 --arg w1=bf16[512,2048@tp] --arg w2=bf16[2048@tp,512] --arg x=bf16[64@dp,512] --arg y=bf16[64@dp,512] | filecheck %s
# RUN: %exit 2 irshard run %examples/mlp.py --mesh dp=2,tp=4 --grad --target gpu-h100:2x4 2> %t.err
# RUN: filecheck %s --check-prefix=RUNERR < %t.err

# CHECK: target gpu-h100:2x4 (estimated)  stage partitioned
# CHECK: all-reduce  {{.*}}bf16[32,512]  32768  49152  tp  4  1  nvlink  28.9 us
# CHECK: all-reduce  {{.*}}bf16[512,512]  524288  524288  dp  2  1  infiniband  46.9 us
# CHECK: time per run: {{[0-9.]+}} us (estimated), from the gpu-h100 profile
# CHECK: fits in 74.5 GiB HBM

# RUNERR: irshard: error: --target gpu-h100:2x4: without GPUs (give --platform gpu where they are) the target is estimated and cannot run; use irshard compile
