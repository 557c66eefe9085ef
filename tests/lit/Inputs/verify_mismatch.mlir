func.func @wrong_message() -> i32 {
  // expected-error @+1 {{no such message}}
  return %x : i32
}
// -----
func.func @wrong_kind() -> i32 {
  // expected-warning @+1 {{use of undeclared SSA value name}}
  return %y : i32
}
// -----
func.func @nothing_emitted(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
  // expected-remark @above {{never emitted}}
}
// -----
func.func @bad_regex() -> i32 {
  // expected-error-re @+1 {{use of {{[a-z}} SSA}}
  return %w : i32
}
