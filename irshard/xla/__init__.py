"""What XLA writes, read: HLO modules through XLA's own objects (`hlo`,
with a module's source tables in `stackframes` and its printed shapes in
`shapes`), the streaming scan of printed HLO (`hloscan`, reading `blocks`,
`scanhits` and `hlolines`, and `forms`: computations that cost the same),
tile assignments in mesh axes (`tiling`) and replica groups
(`replica_groups`).

May import `irshard.core` and `irshard.backend`.
"""
