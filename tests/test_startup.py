"""``emqlab --version`` and ``emqlab --help`` load no command: none of redis-py, fakeredis, lupa, rich, PyYAML
or matplotlib is imported (the CLI's group lists its commands from ``emqlab.ui.cli.COMMANDS``), and each
command's own line there is the one ``--help`` shows. Start-up CPU is measured in ``benchmarks/`` (no timing
here)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from emqlab.ui.cli import COMMANDS, main

HEAVY = ("redis", "fakeredis", "lupa", "rich", "yaml", "matplotlib", "numpy", "emqlab.engine", "emqlab.backend")

_PROBE = """
import json, sys
heavy = json.loads(sys.argv[2])
sys.argv = ["emqlab", *json.loads(sys.argv[1])]
from emqlab.ui.entry import entry
try:
    entry()
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))))
"""


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["-h"]])
def test_version_and_help_import_nothing_heavy(args: list[str]) -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(args), json.dumps(HEAVY)],
                         capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    assert json.loads(lines[-1]) == [], f"emqlab {' '.join(args)} imported {lines[-1]}"
    assert "emqlab" in out


#: every emqlab module ``emqlab --version`` and ``--help`` import: the CLI's group and what it needs to print
#: its help (the exit-code table) and to handle a stop signal, no layer below that
VERSION_MODULES = ["emqlab", "emqlab._moved", "emqlab.explore", "emqlab.explore.stops", "emqlab.protocol",
                   "emqlab.protocol.stopped", "emqlab.protocol.verdict", "emqlab.ui", "emqlab.ui.cli",
                   "emqlab.ui.entry"]

_MODULES = """
import json, sys
sys.argv = ["emqlab", *json.loads(sys.argv[1])]
from emqlab.ui.entry import entry
try:
    entry()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_import_exactly_these_modules(args: list[str]) -> None:
    """The whole set: of emqlab, exactly :data:`VERSION_MODULES`; outside the standard library, click alone
    (besides the interpreter's own start-up hooks, which an editable install adds)."""
    out = subprocess.run([sys.executable, "-c", _MODULES, json.dumps(args)], capture_output=True, text=True,
                         check=True).stdout
    modules = json.loads(out.strip().splitlines()[-1])
    assert [m for m in modules if m.split(".")[0] == "emqlab"] == VERSION_MODULES
    others = {m.split(".")[0] for m in modules} - set(sys.stdlib_module_names) - {"emqlab", "__main__"}
    assert {m for m in others if not m.startswith(("__editable__", "_distutils_hack"))} == {"click"}


def test_help_lists_every_command_with_its_line_and_each_loads() -> None:
    help_text = CliRunner().invoke(main, ["--help"], terminal_width=100).output
    listed = re.findall(r"^  (\S+)\s+(.+)$", help_text.split("Commands:")[1], flags=re.M)
    assert listed == [(name, short) for name, (_module, _attr, short) in COMMANDS.items()]
    assert max(map(len, help_text.splitlines())) <= 100
    ctx = click.Context(main)
    for name in COMMANDS:  # each name loads the command that answers to it
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name
