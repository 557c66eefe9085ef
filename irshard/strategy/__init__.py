"""Other strategies: `irshard suggest` tries local changes to the
shardings and compiles each (`suggest`; what it found is `suggestions`);
`irshard search` builds whole strategies from a program's leaves (`rules`)
and ranks them by real compiles (`search`; what it found is
`searchresult`).

May import every package below it, up to `irshard.running`.
"""
