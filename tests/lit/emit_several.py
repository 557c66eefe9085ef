# Several --emit print the stages in pipeline order, each under a header,
# whatever order they were asked in.
# RUN: irshard compile %s --mesh x=2 --emit optimized --emit stablehlo --emit propagated | filecheck %s

# CHECK: // ----- irshard stage: stablehlo
# CHECK-NEXT: module @jit_f
# CHECK: // ----- irshard stage: propagated
# CHECK-NEXT: module @jit_f
# CHECK: sdy.sharding_origins
# CHECK: // ----- irshard stage: optimized
# CHECK-NEXT: HloModule jit_f


def f(a: "f32[4@x]"):
    return a * 2
