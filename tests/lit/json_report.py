# The JSON report, schema 1: the keys other tools read, in a stable order.
# RUN: irshard compile %s --mesh x=2,y=2 --format json | filecheck %s

# CHECK: {
# CHECK-NEXT: "schema": 1,
# CHECK-NEXT: "source": "{{.*}}json_report.py",
# CHECK-NEXT: "function": "f",
# CHECK-NEXT: "stage": "optimized",
# CHECK-NEXT: "mesh": {
# CHECK-NEXT: "axes": [
# CHECK-NEXT: {"name": "x", "size": 2},
# CHECK-NEXT: {"name": "y", "size": 2}
# CHECK-NEXT: ],
# CHECK-NEXT: "devices": 4,
# CHECK-NEXT: "platform": "cpu"
# CHECK-NEXT: },
# CHECK-NEXT: "target": {"name": "cpu", "kind": "cpu", "profile": "cpu-host", "estimated": false},
# CHECK-NEXT: "inputs": [
# CHECK-NEXT: {
# CHECK-NEXT: "name": "a",
# CHECK-NEXT: "dtype": "f32",
# CHECK-NEXT: "shape": [8, 6],
# CHECK-NEXT: "sharding": ["x+y", "_"],
# CHECK-NEXT: "local_shape": [2, 6]
# CHECK: "outputs": [
# CHECK-NEXT: {
# CHECK-NEXT: "index": 0,
# CHECK-NEXT: "name": "result",
# CHECK: "collectives": [
# CHECK: "totals": {
# CHECK-NEXT: "count": 1,
# CHECK-NEXT: "by_kind": {"all-reduce": 1},
# CHECK-NEXT: "bytes_per_run": 24,
# CHECK-NEXT: "wire_bytes_per_run": 36,
# CHECK-NEXT: "time_s": {{[0-9.e-]+}}
# CHECK-NEXT: },
# CHECK-NEXT: "memory": {
# CHECK-NEXT: "argument_bytes": 48,
# CHECK-NEXT: "output_bytes": 24,
# CHECK-NEXT: "alias_bytes": 0,
# CHECK-NEXT: "temp_bytes": {{[0-9]+}},
# CHECK-NEXT: "peak": {
# CHECK-NEXT: "bytes": {{[0-9]+}},
# CHECK-NEXT: "source": "XLA buffer assignment",
# CHECK-NEXT: "schedule_position": {{[0-9]+}},
# CHECK-NEXT: "instruction": "{{.+}}",
# CHECK-NEXT: "schedule_length": {{[0-9]+}},
# CHECK-NEXT: "curve": [{{.*}}],
# CHECK-NEXT: "by_kind": {{{.*}}"argument": 48, "output": 24},
# CHECK-NEXT: "buffers": [
# CHECK-NEXT: {"bytes": 48, "kind": "argument", "path": "a", "shape": "f32[2,6]", "source": null},
# CHECK: "step": {
# CHECK-NEXT: "step_s": {{[0-9.e-]+}},
# CHECK-NEXT: "launch_s": {{[0-9.e-]+}},
# CHECK-NEXT: "compute_s": {{[0-9.e-]+}},
# CHECK-NEXT: "exposed_comm_s": {{[0-9.e-]+}},
# CHECK-NEXT: "overlapped_comm_s": 0.0,
# CHECK-NEXT: "compute": {
# CHECK-NEXT: "by_source": {"roofline": {{[0-9.e-]+}}},
# CHECK-NEXT: "by_kind": {"kLoop fusion": {{[0-9.e-]+}}}
# CHECK-NEXT: },
# CHECK-NEXT: "comm_by_axes": {
# CHECK-NEXT: "x,y": {"exposed_s": {{[0-9.e-]+}}, "overlapped_s": 0.0}
# CHECK-NEXT: },
# CHECK-NEXT: "error_band": {{[0-9.]+}},
# CHECK-NEXT: "assumes": "4 simulated devices on {{[0-9]+}} core{{s?}}, at the rates measured with 4 running at once"
# CHECK-NEXT: },
# CHECK-NEXT: "findings": []
# CHECK-NEXT: }


def f(a: "f32[8@x+y,6]"):
    return a.sum(axis=0)
