"""Running a compiled program on a mesh: on this host (`execution`,
its inputs made by `inputs`, timed as a training loop runs it by
`timing`), in
several processes or hosts (`distributed`; `--processes N` started
here by `processes`) and as Ray tasks (`raylaunch`, each task `raytask`),
and the sharded run checked against the same function on one device
(`check`, `run --check`, against what `reference` runs).

May import every package below it, up to `irshard.stages`.
"""
