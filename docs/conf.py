"""Sphinx configuration: Markdown pages (MyST), the command reference from
the parser (sphinx-argparse), the Python API from docstrings (autodoc), and
the pass reference from the registry (_ext/irshard_passes.py)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "_ext"))

# The API's and the passes' imports start JAX: on the CPU, one device.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

project = "irshard"
copyright = "the irshard authors"
author = "the irshard authors"

extensions = [
    "myst_parser",
    "sphinxarg.ext",
    "sphinx.ext.autodoc",
    "irshard_passes",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "requirements.txt"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
highlight_language = "text"
smartquotes = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"

html_theme = "furo"
html_title = "irshard"


def _plain_help() -> None:
    """The parser's help strings are plain text, not reStructuredText: a
    glob's `**` or `*` would read as emphasis. Escape inline markup before
    sphinx-argparse parses them."""
    import re

    import sphinxarg.ext

    render_list = sphinxarg.ext.render_list

    def escape(text: str) -> str:
        text = re.sub(r"([\\*`|])", r"\\\1", text)
        return re.sub(r"(?<=\w)_(?!\w)", r"\\_", text)

    def plain_render_list(items, markdown_help, settings=None):
        items = [escape(i) if isinstance(i, str) else i for i in items]
        return render_list(items, markdown_help, settings)

    sphinxarg.ext.render_list = plain_render_list


_plain_help()


def _docstring_code(app, what, name, obj, options, lines) -> None:
    """irshard's docstrings write code as `x` (Markdown's way); in
    reStructuredText that is ``x``, and a letter right after it (`Spec`s)
    needs an escaped space."""
    import re

    def literal(match):
        after = match.group(2)
        return f"``{match.group(1)}``" + ("\\ " if after else "") + after

    pattern = re.compile(r"(?<![`:])`([^`\n]+)`(?!`)(\w?)")
    lines[:] = [pattern.sub(literal, line) for line in lines]


def setup(app):
    app.connect("autodoc-process-docstring", _docstring_code)
