# A malformed mesh is one error line naming the axis and what is accepted.
# RUN: %exit 2 irshard compile %s --mesh x=0 2> %t.err
# RUN: filecheck %s --check-prefix=ZERO < %t.err
# RUN: %exit 2 irshard compile %s --mesh x=a 2> %t.err
# RUN: filecheck %s --check-prefix=NOTINT < %t.err
# RUN: %exit 2 irshard compile %s --mesh x 2> %t.err
# RUN: filecheck %s --check-prefix=NOSIZE < %t.err
# RUN: %exit 2 irshard compile %s --mesh x=2,x=2 2> %t.err
# RUN: filecheck %s --check-prefix=TWICE < %t.err

# ZERO: irshard: error: mesh axis 'x' has size '0'; sizes must be positive integers
# NOTINT: irshard: error: mesh axis 'x' has size 'a'; sizes must be positive integers
# NOSIZE: irshard: error: mesh axis 'x' has no size; expected NAME=SIZE[,NAME=SIZE...], e.g. x=4 or dp=2,tp=4
# TWICE: irshard: error: mesh axis 'x' appears twice in 'x=2,x=2'; each axis is named once


def f(a: "f32[8@x]"):
    return a * 2
