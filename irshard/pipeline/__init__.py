"""The staged pipeline and what reads it whole: trace, lower, propagate,
partition, compile (`stages`), IR files as programs (`irfile`), the sharded
run checked against one device (`check`), which device holds which slice
(`show`), the HTML page (`htmlreport`, `report.html`), two reports compared
(`diff`) and the calibration of a host (`calibrate`).

May import every package below it: core, backend, xla, hardware, reporting,
collectives, ir, loading.
"""
