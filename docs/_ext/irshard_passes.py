"""A Sphinx directive, `irshard-passes`, that writes the pass reference from
the registry `irshard opt --list-passes` reads (`irshard.passes.PASSES`): each
of irshard's passes with its docstring and options, then the passes MLIR has
registered in jaxlib. Generated at build time, so it cannot go stale."""

from __future__ import annotations

import inspect

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


def _text(text: str) -> list[nodes.Node]:
    """Plain text with `code` spans as literals."""
    out: list[nodes.Node] = []
    for i, part in enumerate(text.split("`")):
        if part:
            out.append(nodes.literal(part, part) if i % 2 else nodes.Text(part))
    return out


def _paragraphs(lines: list[str]) -> list[nodes.Node]:
    out, block = [], []
    for line in lines + [""]:
        if line.strip():
            block.append(line.strip())
        elif block:
            out.append(nodes.paragraph("", "", *_text(" ".join(block))))
            block = []
    return out


def _section(document, title: str, ident: str) -> nodes.section:
    section = nodes.section(ids=[ident])
    section += nodes.title("", "", nodes.literal(title, title))
    document.note_implicit_target(section)
    return section


def _pass_section(document, name: str, cls) -> nodes.section:
    lines = inspect.cleandoc(cls.__doc__ or "").splitlines()
    summary, body = (lines[0], lines[1:]) if lines else ("", [])
    stripped = [line.strip() for line in body]
    options: list[str] = []
    if "Options:" in stripped:
        at = stripped.index("Options:")
        body, options = body[:at], body[at + 1:]
    section = _section(document, name, f"pass-{name}")
    section += _paragraphs([summary])
    section += _paragraphs(body)
    fields = [f.name.replace("_", "-") for f in cls.options()]
    if fields:
        usage = name + "{" + " ".join(f"{f}=..." for f in fields) + "}"
        section += nodes.paragraph("", "", nodes.Text("Options: "),
                                   nodes.literal(usage, usage))
    if options:
        text = inspect.cleandoc("\n".join(options))
        section += nodes.literal_block(text, text)
    return section


class IrshardPasses(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from irshard import backend
        from irshard.ir.opt import registered_passes
        from irshard.passes import PASSES, pass_class

        document = self.state.document
        out: list[nodes.Node] = []
        for name in sorted(PASSES):
            out.append(_pass_section(document, name, pass_class(name)))
        backend.configure(1, "cpu")
        mlir = registered_passes(backend.ir_context())
        section = nodes.section(ids=["passes-registered-with-mlir"])
        section += nodes.title("", "Passes registered with MLIR")
        section += _paragraphs([
            "Shardy's and upstream's passes jaxlib registers, usable in the same",
            "pipelines; those marked `func.func` run on each function and are",
            "nested under `func.func` for you."])
        items = nodes.bullet_list()
        for name, anchor in mlir:
            para = nodes.paragraph("", "", nodes.literal(name, name))
            if anchor == "func.func":
                para += nodes.Text(" (func.func)")
            items += nodes.list_item("", para)
        section += items
        out.append(section)
        return out


def setup(app):
    app.add_directive("irshard-passes", IrshardPasses)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
