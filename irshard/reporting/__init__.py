"""The report as a value and how it is written: the collectives, tensors
and totals (`report`; collectives alike share their fields in `packed`),
its other parts as typed, frozen values (`parts`, the memory peak `peak`),
its JSON (`writer`) and text (`text`, with units and tables in `cells` and
the simulated step in `steptext`), the HTML page (`htmlreport`,
`report.html`, from values only), two reports compared (`diff`), budgets
held to it (`budget`), device layouts (`layout`), the predicted timeline
(`trace`) and how a report shows itself in a notebook (`notebook`).

May import `irshard.core`, `irshard.backend`, `irshard.xla`,
`irshard.timemodel` and `irshard.hardware`; nothing here imports the code
that builds a report.
"""
