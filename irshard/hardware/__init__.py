"""Targets: what `--target` names (simulated CPU devices, a TPU slice, a
GPU cluster), where the program's mesh lives (`targets.Placement`) and the
profile its times come from (read by `irshard.timemodel.profiles`).

May import `irshard.core`, `irshard.backend`, `irshard.xla` and
`irshard.timemodel`.
"""
