# irshard collectives reads an HLO text file: async collectives of every kind,
# nested loops, and metadata in both forms XLA prints.
# RUN: irshard collectives %inputs/../../data/async_collectives.hlo --mesh a=2,b=2 | filecheck %s
# RUN: %exit 2 irshard collectives %inputs/not_hlo.hlo 2> %t.err
# RUN: filecheck %s --check-prefix=BAD < %t.err
# RUN: %exit 2 irshard collectives %inputs/../../data/async_collectives.hlo --mesh a=8 2> %t.err
# RUN: filecheck %s --check-prefix=MESH < %t.err

# CHECK: async_collectives.hlo  mesh a=2,b=2 (4 devices)  stage file  module async_collectives.hlo
# CHECK: all-gather               ag-start          f32[8,8]            256   128  a         2     1  {{.*}}train.py:12 (loss)
# CHECK: all-reduce (2 combined)  ar-start          (f32[8], f32[8])     64    64  b         2     1  {{.*}}train.py:12 (loss) [inferred]
# CHECK: reduce-scatter           reduce-scatter.1  f32[2]                8    24  a,b       4     1  {{.*}}train.py:40
# CHECK: collective-permute       cp-start          f32[8]               32    32  a,b       4    15  {{.*}}train.py:30 (step)
# BAD: irshard: error: {{.*}}not_hlo.hlo does not parse as HLO: INVALID_ARGUMENT: Syntax error
# MESH: irshard: error: --mesh a=8 has 8 devices but async_collectives.hlo runs on 4
