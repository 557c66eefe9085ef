"""Measures this host for the cpu-host profile's `by_devices` entries.

For each device count, `irshard calibrate --mesh x=N --format json` times
the collectives and the compute of N simulated CPU devices sharing this
host's cores; the fitted links and the compute numbers are written into
irshard/timemodel/profiles.json under `cpu-host.by_devices["N"]`, each
number with its source:

    python tools/host_profile.py [--devices 2,4,8] [--machine "2-core ..."]
        [--add flops_elementwise,transcendentals]
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(ROOT, "irshard", "timemodel", "profiles.json")


def calibrate(devices: int) -> dict:
    done = subprocess.run([sys.executable, "-m", "irshard", "calibrate", "--mesh",
                           f"x={devices}", "--format", "json"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def entry(result: dict, machine: str) -> dict:
    n = result["devices"]
    day = datetime.date.today().isoformat()
    bands = ", ".join(f"{b['band']} {b['error']:.0%}" for b in result["bands"])
    where = f"{machine}, {n} simulated CPU devices"
    links = f"measured by irshard calibrate --mesh x={n} on {day} ({where}; " \
            f"latency of a group of all {n}, other groups' weighed by their " \
            f"rendezvous: 1 of 8 all-reduces of 16 bytes in a row); median " \
            f"relative error {result['error']:.0%} on held-out sizes ({bands})"
    host = result["links"]["host"]
    host["bandwidth"]["source"] = host["latency"]["source"] = links
    compute = result["compute"]
    measured = f"measured by irshard calibrate --mesh x={n} on {day} ({where}, " \
               f"all running at once; programs run whole, launch taken off)"
    return {"links": {"host": host},
            "compute": {
                "flops": {"value": compute["flops"],
                          "source": f"{measured}: matrix products of sides 256 and 512"},
                "bandwidth": {"value": compute["bandwidth"],
                              "source": f"{measured}: an elementwise op with a fresh "
                                        f"result, [bytes read and written, bytes/s]"},
                "sliced_strided_bandwidth": {
                    "value": compute["sliced_strided_bandwidth"],
                    "source": f"{measured}: 2 and 6 slices of 1 MiB of a stacked "
                              f"array, summed and written transposed, per byte "
                              f"more"},
                "op_overhead": {"value": compute["op_overhead"],
                                "source": f"{measured}: 64 tiny products, each "
                                          f"followed by a tanh, per instruction"},
                "rendezvous_skew": {
                    "value": compute["rendezvous_skew"],
                    "source": f"{measured}: 8 products of sides 256 and 384 each "
                              f"followed by an all-reduce, less both alone, per "
                              f"all-reduce"},
                "launch": {"value": compute["launch"],
                           "source": f"{measured}: the median execution of x + 1"},
                "output": {"value": compute["output"],
                           "source": f"{measured}: 33 results against 1, less the "
                                     f"instructions' own time, per result"},
                "loop_trip": {"value": compute["loop_trip"],
                              "source": f"{measured}: loops of 110 and 10 trips "
                                        f"around one elementwise op, less the "
                                        f"instructions' own time, per trip"},
                "first_collective": {
                    "value": compute["first_collective"],
                    "source": f"{measured}: one all-reduce of 16 bytes less the "
                              f"launch and less one of eight in a row"},
                "flops_elementwise": {
                    "value": compute["flops_elementwise"],
                    "source": f"{measured}: 64 multiply-adds in a row on each "
                              f"element of 1 MiB"},
                "transcendentals": {
                    "value": compute["transcendentals"],
                    "source": f"{measured}: 16 tanh in a row on each element of "
                              f"1 MiB, less their multiply-adds"}}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="2,4,8")
    parser.add_argument("--machine", default="2-core development machine")
    parser.add_argument("--add", default=None, metavar="KEYS",
                        help="only these compute numbers (comma separated, e.g. "
                             "flops_elementwise,transcendentals), added to the "
                             "entries there: the rest stay as measured before")
    args = parser.parse_args()
    with open(PROFILES, encoding="utf-8") as f:
        data = json.load(f)
    host = data["profiles"]["cpu-host"]
    by_devices = dict(host.get("by_devices", {})) if args.add else {}
    for n in (int(d) for d in args.devices.split(",")):
        measured = entry(calibrate(n), args.machine)
        if args.add:
            for key in args.add.split(","):
                by_devices.setdefault(str(n), measured)["compute"][key] = \
                    measured["compute"][key]
        else:
            by_devices[str(n)] = measured
        print(f"{n} devices: measured", file=sys.stderr)
    host["by_devices"] = by_devices
    if not args.add:
        # Without an entry nearer (no by_devices read), the most devices
        # measured.
        host["links"] = by_devices[max(by_devices, key=int)]["links"]
    with open(PROFILES, "w", encoding="utf-8") as f:
        f.write(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
