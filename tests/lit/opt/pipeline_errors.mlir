// Pipelines that do not parse point at the column; unknown passes are
// rejected before anything runs.
// RUN: %exit 2 irshard opt %s -p 'canonicalize,,cse' 2> %t.err
// RUN: filecheck %s --check-prefix=SYNTAX < %t.err
// RUN: %exit 2 irshard opt %s -p 'sdy-propagation-pipeline,sdy-propagate-everything' 2> %t.err
// RUN: filecheck %s --check-prefix=UNKNOWN < %t.err
// RUN: %exit 2 irshard opt %s -p 'irshard-shard-everything' 2> %t.err
// RUN: filecheck %s --check-prefix=IRSHARD < %t.err
// RUN: %exit 2 irshard opt %s -p 'irshard-annotate{mesh=x=2 bogus=1}' 2> %t.err
// RUN: filecheck %s --check-prefix=OPTION < %t.err
// RUN: %exit 2 irshard opt %s -p 'canonicalize{bogus=1}' 2> %t.err
// RUN: filecheck %s --check-prefix=MLIROPTION < %t.err
// RUN: %exit 2 irshard opt %s -p 'func.func(irshard-print-shardings)' 2> %t.err
// RUN: filecheck %s --check-prefix=NESTED < %t.err
// RUN: %exit 2 irshard opt %s -p 'cse{' 2> %t.err
// RUN: filecheck %s --check-prefix=BRACE < %t.err

// SYNTAX: irshard: error: pipeline 'canonicalize,,cse': expected a pass name, found ',' at column 14
// UNKNOWN: irshard: error: pipeline 'sdy-propagation-pipeline,sdy-propagate-everything': unknown pass 'sdy-propagate-everything' (see 'irshard opt --list-passes') at column 26
// IRSHARD: irshard: error: pipeline 'irshard-shard-everything': unknown pass 'irshard-shard-everything' (irshard's passes: inline, irshard-annotate, irshard-collectives, irshard-constrain, irshard-print-shardings, irshard-strip-shardings) at column 1
// OPTION: irshard: error: pass 'irshard-annotate' has no option 'bogus'; its options are: mesh, args, results, mesh-name
// MLIROPTION: irshard: error: pipeline 'canonicalize{bogus=1}': pass 'canonicalize' has no option 'bogus' at column 1
// NESTED: irshard: error: pipeline 'func.func(irshard-print-shardings)': irshard's passes work on the whole module; put them outside 'func.func(...)' at column 1
// BRACE: irshard: error: pipeline 'cse{': unclosed '{' of pass options at column 4

func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
