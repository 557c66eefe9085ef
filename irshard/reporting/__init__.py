"""The report as a value and how it is written: the collectives, tensors and
totals (`report`: dataclasses, `to_json`, the JSON writer and the text
tables), budgets held to it (`budget`), device layouts (`layout`) and how a
report shows itself in a notebook (`notebook`).

May import `irshard.core`, `irshard.backend`, `irshard.xla` and
`irshard.hardware`; nothing here imports the code that builds a report.
"""
