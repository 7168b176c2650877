"""The texts of :mod:`emqlab.protocol.messages` have one home: no code of emqlab (a Python string that is
no docstring, a Lua string outside a comment) holds a copy of one, and each is used somewhere."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from emqlab.protocol import messages

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "emqlab" / "protocol" / "messages.py"


def _python_strings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [n.value.decode("utf-8", "replace") if isinstance(n.value, bytes) else n.value
            for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes))
            and id(n) not in docstrings]


def _lua_code(path: Path) -> str:
    text = re.sub(r"--\[\[.*?\]\]", "", path.read_text(), flags=re.S)
    return "\n".join(line.split("--", 1)[0] if not re.search(r"['\"][^'\"]*--", line) else line
                     for line in text.splitlines())


def _fragments(text: str) -> list[str]:
    """The pieces of a text between its format fields that say something (12 characters or more)."""
    return [p for p in re.split(r"%[ds]", text) if len(p.strip()) >= 12]


CODE = [(p, "\n".join(_python_strings(p))) for p in sorted((ROOT / "emqlab").rglob("*.py")) if p != HOME]
# (cjson.lua, cmsgpack.lua and bit.lua are Lua versions of three libraries Redis bundles, lua-cjson,
# lua-cmsgpack and LuaBitOp: as in Redis, each module keeps its library's own texts)
CODE += [(ROOT / "lua" / "lib" / "sandbox.lua", _lua_code(ROOT / "lua" / "lib" / "sandbox.lua"))]


@pytest.mark.parametrize("name", sorted(messages.texts()))
def test_no_copy_of_a_text_outside_its_home(name: str) -> None:
    text = messages.texts()[name]
    copies = [f"{p.relative_to(ROOT)}: {piece!r}" for piece in _fragments(text) for p, code in CODE if piece in code]
    assert not copies, f"{name} is also written out in: {copies}"


def test_every_text_is_used() -> None:
    python = "\n".join(p.read_text() for p in (ROOT / "emqlab").rglob("*.py") if p != HOME)
    lua = (ROOT / "lua" / "lib" / "sandbox.lua").read_text()
    unused = [name for name in messages.texts()
              if f"messages.{name}" not in python and f"MSG.{name.lower()}" not in lua]
    assert unused == []


def test_the_sandbox_reads_every_text_it_names_from_the_module() -> None:
    lua = (ROOT / "lua" / "lib" / "sandbox.lua").read_text()
    named = set(re.findall(r"\bMSG\.([a-z_0-9]+)", lua))
    assert named and named <= {k.decode() for k in messages.lua_table()}
