# irshard devices: the platform's devices, and each process's.
# RUN: irshard devices --mesh x=4 | filecheck %s
# RUN: irshard devices --mesh x=2 --format json | filecheck %s --check-prefix=JSON

# CHECK: platform: cpu, 4 devices, 1 process
# CHECK-NEXT: process 0: devices 0-3
# JSON: "platform": "cpu",
# JSON-NEXT: "process_count": 1,
# JSON: "processes": [
# JSON-NEXT: {
# JSON-NEXT: "index": 0,
# JSON-NEXT: "devices": [0, 1]
