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


def test_help_lists_every_command_with_its_line_and_each_loads() -> None:
    help_text = CliRunner().invoke(main, ["--help"], terminal_width=100).output
    listed = re.findall(r"^  (\S+)\s+(.+)$", help_text.split("Commands:")[1], flags=re.M)
    assert listed == [(name, short) for name, (_module, _attr, short) in COMMANDS.items()]
    assert max(map(len, help_text.splitlines())) <= 100
    ctx = click.Context(main)
    for name in COMMANDS:  # each name loads the command that answers to it
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name
