# A malformed type names itself and what would be accepted.
# RUN: %exit 2 irshard compile %s --mesh x=2 --arg a=f33[4] 2> %t.err
# RUN: filecheck %s --check-prefix=DTYPE < %t.err
# RUN: %exit 2 irshard compile %s --mesh x=2 --arg a=f32[4,] 2> %t.err
# RUN: filecheck %s --check-prefix=EMPTY < %t.err
# RUN: %exit 2 irshard compile %s --mesh x=2 --arg a=f32[-1] 2> %t.err
# RUN: filecheck %s --check-prefix=NEGATIVE < %t.err
# RUN: %exit 2 irshard compile %s --mesh x=2 2> %t.err
# RUN: filecheck %s --check-prefix=MISSING < %t.err

# DTYPE: irshard: error: type 'f33[4]': unknown dtype 'f33'; expected one of pred i8 i16 i32 i64 u8 u16 u32 u64 f16 bf16 f32 f64 c64 c128 (bool is accepted as pred)
# EMPTY: irshard: error: type 'f32[4,]': dimension 2 is empty; each dimension is a non-negative integer size, optionally with @AXES
# NEGATIVE: irshard: error: type 'f32[-1]': dimension 1 has size '-1'; sizes are non-negative integers
# MISSING: irshard: error: argument 'a' of 'f' has no type; pass --arg a=TYPE (e.g. --arg a=f32[1024]), annotate it: def f(a: "f32[1024]"), or give the arguments with --args NAME


def f(a):
    return a * 2
