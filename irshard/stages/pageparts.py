"""What the HTML page shows beside a report, taken from the program
before the page is rendered: where its inputs and outputs live (from a
run's tensors, else the executable's shardings), the IR of the stage the
report read, and the files its compile ran. The page itself is written
from these values only (`reporting.htmlreport`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from irshard.stages import irfile, placing

if TYPE_CHECKING:           # the HTML writer is imported for HTML only
    from irshard.reporting import htmlreport


def program_files(compiled) -> frozenset[str]:
    """The real paths of the Python files a compile ran: its program and
    the modules loaded with it. None for a module read from a .mlir file
    (its locations are the file's word), or without a compile."""
    from irshard.reporting import htmlreport
    info = getattr(compiled, "info", None)
    if info is None or irfile.is_mlir(info.source):
        return frozenset()
    return htmlreport.loaded_files()


def page_parts(report, compiled=None, run=None,
               stages=None) -> htmlreport.PageParts:
    """What the HTML page shows beside `report`, taken from the program
    now: where its inputs and outputs live (from `run`'s tensors, else the
    executable), the IR of the stage the report read (from the pipeline's
    `stages` where given), and the files its compile ran."""
    from irshard.reporting import htmlreport
    if compiled is None:
        return htmlreport.PageParts(ir_text=stages.text(report.stage_name)
                                    if stages is not None else None)
    layout = None
    try:
        if run is not None:
            inputs = [t.placed for t in run.inputs]
            outputs = [t.placed for t in run.outputs]
        else:
            inputs, outputs = placing.placed(compiled)
        try:
            devices = placing.mesh_device_ids(compiled)
        except (AttributeError, RuntimeError, TypeError, ValueError):
            devices = None
        layout = htmlreport.layout_json(inputs, outputs, devices)
    except (AttributeError, RuntimeError, TypeError, ValueError):
        pass
    if stages is not None:
        ir_text = stages.text(report.stage_name)
    elif report.stage_name == "partitioned":
        ir_text = compiled.partitioned().as_text()
    else:
        ir_text = compiled.as_text()
    return htmlreport.PageParts(layout, ir_text, compiled.info.user_dir,
                                program_files(compiled))
