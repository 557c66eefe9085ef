"""Other strategies: `irshard suggest` tries local changes to the shardings
and compiles each (`suggest`).

May import every package below it, up to `irshard.running`.
"""
