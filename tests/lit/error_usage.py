# Usage errors: unknown stages, an output directory that does not exist (and
# nothing written), a missing file, a syntax error in the user's file.
# RUN: %exit 2 irshard compile %s --mesh x=2 --emit lowered 2> %t.err
# RUN: filecheck %s --check-prefix=STAGE < %t.err
# RUN: %exit 2 irshard compile %s --mesh x=2 --stage stablehlo 2> %t.err
# RUN: filecheck %s --check-prefix=REPORT < %t.err
# RUN: %exit 2 irshard compile %s --mesh x=2 -o %t.missing/report.txt 2> %t.err
# RUN: filecheck %s --check-prefix=OUTDIR < %t.err
# RUN: %exit 2 irshard compile %s.nothere --mesh x=2 2> %t.err
# RUN: filecheck %s --check-prefix=NOFILE < %t.err
# RUN: %exit 2 irshard compile %inputs/syntax_error.py --mesh x=2 2> %t.err
# RUN: filecheck %s --check-prefix=SYNTAX < %t.err

# STAGE: irshard: error: unknown stage 'lowered'; stages are stablehlo, propagated, partitioned, optimized
# REPORT: irshard: error: the report reads HLO, not stage 'stablehlo'; --stage is one of partitioned, optimized
# OUTDIR: irshard: error: -o {{.*}}report.txt: directory '{{.*}}.missing' does not exist
# NOFILE: irshard: error: file '{{.*}}error_usage.py.nothere' does not exist
# SYNTAX: irshard: error: {{.*}}syntax_error.py:4:{{[0-9]+}}: syntax error:


def f(a: "f32[4@x]"):
    return a
