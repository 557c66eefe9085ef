"""What irshard is handed or reads back is not trusted: reports and HLO files
read for a page, the search cache, profiles, and the pytest plugin's
report names. Each case once leaked a file, followed a planted link,
believed a tampered entry, or crashed; each now works or ends in one
`irshard: error:` line with exit 2."""

import json
import os
import re

from irshard import cli
from tests.conftest import EXAMPLES, ROOT

HEAT = os.path.join(EXAMPLES, "heat1d.py")
SECRET = "irshard-test-secret-0451"


def _page_data(path) -> dict:
    text = open(path, encoding="utf-8").read()
    m = re.search(r'<script type="application/json" id="irshard-data">(.*?)</script>',
                  text, re.S)
    return json.loads(m.group(1))


def test_a_page_embeds_only_the_sources_its_compile_ran(tmp_path, capsys):
    """A report or an HLO file may name any file of this machine as a
    collective's source; a page built from it shows none of them. A page of
    a compile shows the program's own file."""
    secret = tmp_path / "secret.txt"
    secret.write_text(f"TOKEN={SECRET}\n" * 30)
    good = str(tmp_path / "good.json")
    assert cli.main(["compile", HEAT, "--fn", "simulate_set", "--mesh", "x=4",
                     "--format", "json", "-o", good]) == 0, capsys.readouterr().err
    report = json.load(open(good))
    assert len(report["collectives"]) >= 2
    report["collectives"][0]["source"]["file"] = str(secret)
    report["collectives"][1]["source"]["file"] = "/proc/self/environ"
    evil = str(tmp_path / "evil.json")
    with open(evil, "w") as f:
        json.dump(report, f)
    page = str(tmp_path / "diff.html")
    assert cli.main(["diff", good, evil, "--format", "html", "-o", page]) == 0, \
        capsys.readouterr().err
    text = open(page, encoding="utf-8").read()
    assert SECRET not in text and "PATH=" not in text
    assert str(secret) in text            # the name is shown, not the file
    assert _page_data(page)["sources"] == {}
    # An HLO file whose metadata names the file.
    hlo = tmp_path / "evil.hlo"
    original = open(os.path.join(ROOT, "tests", "data", "async_collectives.hlo")).read()
    assert "/home/user/model/train.py" in original
    hlo.write_text(original.replace("/home/user/model/train.py", str(secret)))
    page = str(tmp_path / "hlo.html")
    assert cli.main(["collectives", str(hlo), "--format", "html", "-o", page]) == 0, \
        capsys.readouterr().err
    text = open(page, encoding="utf-8").read()
    assert SECRET not in text and str(secret) in text
    # The compile's own program is shown.
    page = str(tmp_path / "heat.html")
    assert cli.main(["compile", HEAT, "--fn", "simulate_set", "--mesh", "x=4",
                     "--format", "html", "-o", page]) == 0, capsys.readouterr().err
    lines = _page_data(page)["sources"]["heat1d.py"]
    assert any(line.startswith("def simulate_set") for line in lines)
