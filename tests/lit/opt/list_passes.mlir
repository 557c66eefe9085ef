// --list-passes: irshard's passes with their summary and options, then the
// ones MLIR has registered. irshard-opt is the same tool.
// RUN: irshard opt --list-passes | filecheck %s
// RUN: irshard-opt --list-passes | filecheck %s

// CHECK: irshard's passes:
// CHECK-NEXT: inline
// CHECK: irshard-annotate
// CHECK-NEXT: Attach a Shardy mesh and argument/result shardings to @main.
// CHECK-NEXT: mesh       the mesh, e.g. `x=2,y=2`; empty keeps the module's own mesh.
// CHECK: irshard-constrain
// CHECK: match      an operation name (`stablehlo.dot_general`, or just
// CHECK: passes registered with MLIR
// CHECK: sdy-insert-explicit-reshards  [func.func]
// CHECK: sdy-propagation-pipeline
// CHECK: canonicalize
