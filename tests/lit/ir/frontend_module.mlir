// A module written the way other frontends emit one (a mesh, sdy.sharding
// on arguments, no JAX attributes): compiled, run and checked against one
// device; --shard adds a sharding by argument name (arg1 or its location
// name) and --mesh is not needed: the module brings its own.
// RUN: irshard compile %s | filecheck %s
// RUN: irshard compile %s --shard arg1=y,_ --format json | filecheck %s --check-prefix=JSON
// RUN: irshard run %s --shard rhs=y,_ --check | filecheck %s --check-prefix=RUN-OUT
// RUN: irshard run %s --mesh x=4,y=1 --shard lhs=x,_ --check | filecheck %s --check-prefix=MESH

// CHECK: frontend_module.mlir:main  mesh x=2,y=2 (4 cpu devices)  stage optimized
// CHECK: lhs   f32[8,16]  x,y       f32[4,8]
// CHECK: all-reduce  {{.*}}  y  2  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  model.jl:20
// JSON: "name": "rhs",
// JSON: "sharding": ["y", "_"],
// RUN-OUT: check against one device: passed
// MESH: mesh x=4,y=1 (4 cpu devices)
// MESH: check against one device: passed

sdy.mesh @mesh = <["x"=2, "y"=2]>

func.func @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>} loc("lhs"),
                %arg1: tensor<16x8xf32> loc("rhs")) -> tensor<8x8xf32> {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32> loc("model.jl":20:3)
  %1 = stablehlo.tanh %0 : tensor<8x8xf32> loc("model.jl":21:3)
  return %1 : tensor<8x8xf32>
}

// A --mesh that does not fit the module's own shardings is one error saying so.
// RUN: %exit 2 irshard compile %s --mesh a=4 2> %t.err
// RUN: filecheck %s --check-prefix=MESHERR < %t.err
// MESHERR: irshard: error: the mesh a=4 replaces the module's @mesh (x=2,y=2), but the module's own shardings do not fit it: 'func.func' op arg 0 - unknown axis name: "x"; use the module's axis names
