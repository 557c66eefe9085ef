"""The documentation against the code: every command and flag the parser
defines is in the command reference and the README, every page is in a
toctree, every link points at something that exists, and the generated
reference pages keep the directives that generate them. Reads files only:
no Sphinx (the docs build has its own environment, `make docs`) and no JAX
(the parser and the pass registry import none)."""

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
REPO_URL = "https://github.com/irshard/irshard"
BLOB = REPO_URL + "/blob/main/"

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def read(*parts: str) -> str:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def pages() -> list[str]:
    """Every Markdown page of the site, relative to docs/, without `.md`."""
    found = []
    for folder, dirs, files in os.walk(DOCS):
        dirs[:] = [d for d in dirs if not d.startswith("_")]
        for name in files:
            if name.endswith(".md"):
                path = os.path.relpath(os.path.join(folder, name), DOCS)
                found.append(path[:-3].replace(os.sep, "/"))
    return sorted(found)


def outside_code(text: str) -> str:
    """The text with fenced code blocks and inline code removed."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def subcommands():
    from irshard.cli import build_parser
    parser = build_parser()
    (action,) = [a for a in parser._actions if a.choices and a.dest != "help"]
    return action.choices


def test_the_parser_imports_no_jax():
    import subprocess
    import sys
    code = ("import sys, irshard.cli, irshard.passes; irshard.cli.build_parser(); "
            "print('jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, cwd=ROOT, env=os.environ | {"PYTHONPATH": ROOT},
                         check=True).stdout
    assert out.strip() == "False"


def test_the_command_reference_is_generated_from_the_parser():
    cli = read("docs", "reference", "cli.md")
    assert re.search(r"\.\. argparse::\n\s+:module: irshard\.cli\n\s+:func: build_parser\n"
                     r"\s+:prog: irshard", cli), "the argparse directive is gone"


def test_every_command_is_in_the_reference_and_the_readme():
    cli = read("docs", "reference", "cli.md")
    readme = read("README.md")
    listed = re.findall(r"^- `irshard ([a-z]+)` — ", readme, flags=re.M)
    names = list(subcommands())
    assert sorted(listed) == sorted(names), "README's one line per command"
    for name in names:
        assert re.search(rf"^irshard {name}\b", cli, flags=re.M), \
            f"irshard {name} has no synopsis in docs/reference/cli.md"


@pytest.mark.parametrize("command", ["compile", "run", "show", "devices", "collectives",
                                     "suggest", "search", "diff", "calibrate", "opt"])
def test_every_flag_is_in_the_synopsis(command):
    """Each command's synopsis names each of its flags, and no flag it
    lacks ("compile's options" stand for compile's own)."""
    cli = read("docs", "reference", "cli.md")
    synopsis = cli[cli.index("## Synopsis"):cli.index("\n## ", cli.index("## Synopsis") + 1)]
    blocks: dict[str, str] = {}
    name = None
    for line in synopsis.splitlines():
        found = re.match(r"irshard ([a-z]+)\b", line)
        if found:
            name = found.group(1)
        elif line.startswith("```"):
            name = None
        if name is not None:
            blocks[name] = blocks.get(name, "") + line + "\n"
    text = blocks[command]
    program = subcommands()["compile"]
    if "(compile's options)" in text or "(compile's program options)" in text:
        text += blocks["compile"]
    parser = subcommands()[command]
    flags = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
    for action in parser._actions:
        if not action.option_strings or "--help" in action.option_strings:
            continue
        assert any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text)
                   for o in action.option_strings), \
            f"irshard {command} {action.option_strings[-1]} is not in its synopsis"
    named = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", blocks[command]))
    if "(compile's program options)" in blocks[command]:
        named |= {o for a in program._actions for o in a.option_strings} & flags
    assert named <= flags, f"irshard {command}'s synopsis names {sorted(named - flags)}"


def test_the_pass_reference_is_generated_from_the_registry():
    from irshard.passes import PASSES
    assert "```{irshard-passes}" in read("docs", "reference", "passes.md")
    assert os.path.exists(os.path.join(DOCS, "_ext", "irshard_passes.py"))
    assert "irshard_passes" in read("docs", "conf.py")
    guide = read("docs", "guides", "ir-files.md")
    for name in PASSES:
        assert f"`{name}" in guide, f"pass {name} is not in docs/guides/ir-files.md"


def test_the_api_reference_names_what_exists():
    api = read("docs", "reference", "api.md")
    named = re.findall(r"^\.\. auto(?:function|class):: (irshard\.[\w.]+)$", api, flags=re.M)
    assert named
    for dotted in named:
        module, name = dotted.rsplit(".", 1)
        tree = ast.parse(read(module.replace(".", os.sep) + ".py"))
        defined = {n.name for n in tree.body
                   if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert name in defined, f"{dotted} (docs/reference/api.md) does not exist"
    for name in ("compile", "run", "report", "search", "compare", "show",
                 "suggest", "collectives_of", "opt", "devices", "calibrate"):
        assert f"irshard.api.{name}\n" in api
    assert "irshard.apiprogram.configure\n" in api
    assert "irshard.apireport.Report\n" in api and "irshard.frontend.load\n" in api


def test_every_page_is_in_a_toctree():
    listed = set()
    for page in pages():
        text = read("docs", page + ".md")
        for block in re.findall(r"^```\{toctree\}\n(.*?)^```", text, flags=re.S | re.M):
            folder = os.path.dirname(page)
            for line in block.splitlines():
                line = line.strip()
                if line and not line.startswith(":"):
                    listed.add(os.path.normpath(os.path.join(folder, line)).replace(os.sep, "/"))
    assert sorted(set(pages()) - listed - {"index"}) == []
    assert sorted(listed - set(pages())) == []


def test_docs_links_exist():
    for page in pages():
        text = outside_code(read("docs", page + ".md"))
        folder = os.path.dirname(os.path.join(DOCS, page))
        for target in LINK.findall(text):
            if target.startswith(BLOB):
                path = os.path.join(ROOT, target[len(BLOB):].split("#")[0])
            elif re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            else:
                path = os.path.join(folder, target.split("#")[0])
            assert os.path.exists(path), f"docs/{page}.md links to {target}, which does not exist"


def test_readme_is_short_and_its_links_lead_somewhere_in_a_clone():
    readme = read("README.md")
    assert len(readme.splitlines()) <= 220
    assert readme.startswith("# irshard\n")
    head = readme[:readme.index("\n## ")]
    assert "make run" in head and "make test" in head
    for target in LINK.findall(outside_code(readme)):
        # Relative to the repository: nothing is published elsewhere.
        assert not target.startswith(("http://", "https://")), \
            f"README links to {target}, outside the clone"
        assert os.path.exists(os.path.join(ROOT, target.split("#")[0])), \
            f"README links to {target}, which does not exist"
        if target.startswith(BLOB):
            path = os.path.join(ROOT, target[len(BLOB):].split("#")[0])
            assert os.path.exists(path), f"README links to {target}, which does not exist"


def test_pyproject_names_the_repository_the_readme_links_to():
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["readme"] == "README.md"
    assert project["urls"]["Repository"] == REPO_URL


def test_make_docs_builds_with_warnings_as_errors():
    makefile = read("Makefile")
    assert re.search(r"^docs: ", makefile, flags=re.M)
    assert "sphinx-build -W --keep-going" in makefile
    assert "make docs" in read(".ci", "run")
    assert "docs/_build/" in read(".gitignore").splitlines()
