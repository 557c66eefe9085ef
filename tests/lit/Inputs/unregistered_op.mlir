func.func @f() -> i32 {
  %0 = "mydialect.op"() : () -> i32
  return %0 : i32
}
