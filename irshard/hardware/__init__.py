"""Targets and time: `--target` and the hardware profiles
(`targets`, `profiles.json`), links, collective times and the roofline
(`cost`).

May import `irshard.core`, `irshard.backend` and `irshard.xla`.
"""
