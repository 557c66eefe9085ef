def matmul(a: "f32[8,8]", b: "f32[8,8]"):
    return a @ b
