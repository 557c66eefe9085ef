"""Running a compiled program on a mesh: on this host (`execution`), in
several processes or hosts (`distributed`) and as Ray tasks (`raylaunch`).

May import every package below it, up to `irshard.pipeline`.
"""
