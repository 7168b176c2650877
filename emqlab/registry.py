"""The script registry: every ``lua/<command>-<numkeys>.lua`` file, its SHA1, and how to call it.

A script's file name declares its number of KEYS (``moveToFinished-14.lua`` takes 14), the convention BullMQ
uses for its shipped scripts (``PROTOCOL.md`` §6). :func:`execute` is the atomic call: ``EVALSHA`` with a
``SCRIPT LOAD`` and one retry when the server answers ``NOSCRIPT`` (the script cache is volatile: a restart,
a failover or ``SCRIPT FLUSH`` empties it — redis.io, "NOSCRIPT" error page).

A second script set, BullMQ's own shipped scripts, is loaded at run time from the installed ``bullmq``
package (:meth:`ScriptSet.bullmq`); nothing of it is stored in this repository.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

_FILE_NAME = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9]*)-(?P<numkeys>\d+)\.lua$")
_INCLUDE = re.compile(rb'^--@include "(?P<path>[A-Za-z0-9_./-]+\.lua)"[ \t]*\r?$', re.M)

Arg = str | bytes | int | float


class ScriptError(Exception):
    """Base of the registry's errors."""


class UnknownScript(ScriptError, KeyError):
    """No script of that name in the set."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class KeyCountMismatch(ScriptError, ValueError):
    """A call passed a number of KEYS different from the count the script's file name declares."""


def lua_dir() -> Path:
    """The folder holding emqlab's own scripts (and ``lib/``, ``includes/``): ``$EMQLAB_LUA_DIR`` if set; else
    ``emqlab/lua/`` beside this module, where a wheel installs the ``emqlab.lua`` data subpackage; else the
    repository's ``lua/`` when this module runs from a checkout (directly or as an editable install)."""
    env = os.environ.get("EMQLAB_LUA_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    installed = here / "lua"
    if (installed / "lib").is_dir() or any(installed.glob("*.lua")):
        return installed
    if (here.parent / "pyproject.toml").is_file():  # a checkout: lua/ sits beside the emqlab/ package
        return here.parent / "lua"
    return installed  # a broken install: the error names the folder the wheel should have filled


def flatten(path: Path, root: Path | None = None) -> bytes:
    """The script at ``path`` with every ``--@include "includes/x.lua"`` line replaced by that file's text
    (relative to ``root``, default the script's folder), each file inlined once, at its first include —
    what the server receives. Raises :class:`ScriptError` for a missing include."""
    root = root or path.parent
    seen: set[str] = set()

    def expand(text: bytes, where: Path) -> bytes:
        def repl(m: re.Match[bytes]) -> bytes:
            rel = m["path"].decode()
            if rel in seen:
                return b"-- (" + m["path"] + b" included above)"
            seen.add(rel)
            target = root / rel
            if not target.is_file():
                raise ScriptError(f"{where.name}: included file {rel} not found under {root}")
            body = expand(target.read_bytes(), target).rstrip(b"\n")
            return b"-- >>> " + m["path"] + b"\n" + body + b"\n-- <<< " + m["path"]

        return _INCLUDE.sub(repl, text)

    return expand(path.read_bytes(), path)


@dataclass(frozen=True)
class Script:
    """One Lua script: ``name`` (e.g. ``moveToFinished``), ``numkeys`` (from the file name), its text and
    SHA1 (hex, as ``SCRIPT LOAD`` returns it)."""

    name: str
    numkeys: int
    text: bytes
    path: str = ""
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.text).hexdigest())

    @property
    def file_name(self) -> str:
        return f"{self.name}-{self.numkeys}.lua"

    def check_keys(self, keys: Sequence[Any]) -> None:
        if len(keys) != self.numkeys:
            raise KeyCountMismatch(
                f"{self.file_name} takes {self.numkeys} KEYS, the call passed {len(keys)}"
            )


class ScriptSet:
    """A named set of scripts, indexed by command name (``scripts["moveToFinished"]``).

    ``origin`` says where the set came from (``emqlab`` or ``bullmq <version>``).
    """

    def __init__(self, scripts: dict[str, Script], origin: str) -> None:
        self._scripts = dict(sorted(scripts.items()))
        self.origin = origin

    # -- loading -----------------------------------------------------------------------------------
    @classmethod
    def from_dir(cls, folder: str | Path, origin: str = "emqlab") -> ScriptSet:
        """Every ``<name>-<numkeys>.lua`` directly inside ``folder`` (``lib/`` and other files are skipped)."""
        folder = Path(folder)
        if not folder.is_dir():
            raise ScriptError(f"no script folder at {folder}")
        scripts: dict[str, Script] = {}
        for path in sorted(folder.glob("*.lua")):
            m = _FILE_NAME.match(path.name)
            if not m:
                continue
            s = Script(m["name"], int(m["numkeys"]), flatten(path), str(path))
            scripts[s.name] = s
        return cls(scripts, origin)

    @classmethod
    def emqlab(cls) -> ScriptSet:
        """emqlab's own scripts from :func:`lua_dir`."""
        return cls.from_dir(lua_dir(), "emqlab")

    @classmethod
    def bullmq(cls) -> ScriptSet:
        """BullMQ's shipped (flattened) scripts from the installed ``bullmq`` package, loaded at run time.

        Raises :class:`ScriptError` when the package is not installed (``pip install bullmq==3.4.4``).
        """
        try:
            version = importlib.metadata.version("bullmq")
            root = importlib.resources.files("bullmq") / "commands"
        except (importlib.metadata.PackageNotFoundError, ModuleNotFoundError) as e:
            raise ScriptError("the bullmq package is not installed: pip install bullmq==3.4.4 (the version"
                              " emqlab's test extra pins; in an emqlab checkout, pip install -e '.[test]')") from e
        return cls.from_dir(Path(str(root)), f"bullmq {version}")

    # -- access ------------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Script:
        try:
            return self._scripts[name]
        except KeyError:
            known = ", ".join(self._scripts) or "none"
            raise UnknownScript(f"no script named {name!r} in the {self.origin} set (known: {known})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._scripts

    def __iter__(self) -> Iterator[Script]:
        return iter(self._scripts.values())

    def __len__(self) -> int:
        return len(self._scripts)

    def names(self) -> list[str]:
        return list(self._scripts)

    # -- calling -----------------------------------------------------------------------------------
    def execute(self, conn: redis.Redis, name: str, keys: Sequence[Arg], args: Sequence[Arg] = ()) -> Any:
        """Run script ``name`` atomically: ``EVALSHA`` on ``conn``; on ``NOSCRIPT``, ``SCRIPT LOAD`` and retry
        once. Returns the raw reply (int, bytes, list, None). Raises :class:`KeyCountMismatch` before sending
        anything when ``len(keys)`` differs from the declared count, and ``redis.ResponseError`` for an
        error reply (a Lua error inside the script included)."""
        return self.call(conn.execute_command, name, keys, args)

    def call(self, send: Callable[..., Any], name: str, keys: Sequence[Arg], args: Sequence[Arg] = ()) -> Any:
        """:meth:`execute` through ``send(*command)``, any function that sends one raw command (a redis-py
        ``execute_command``, or :func:`emqlab.backends.command_executor`). The command's arguments are str
        (the command words, the SHA1, KEYS and ARGV given as str), int (the key count) and bytes (a
        ``SCRIPT LOAD`` body), as redis-py's ``execute_command`` takes them."""
        script = self[name]
        script.check_keys(keys)
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            return send(*command)
        except redis.exceptions.NoScriptError:
            loaded = send("SCRIPT", "LOAD", script.text)
            if isinstance(loaded, bytes):
                loaded = loaded.decode()
            if loaded != script.sha:  # pragma: no cover - a server that hashes differently
                raise ScriptError(
                    f"server returned SHA1 {loaded} for {script.file_name}, expected {script.sha}") from None
            return send(*command)


_DEFAULT: ScriptSet | None = None


def default_scripts() -> ScriptSet:
    """emqlab's own script set, loaded once per process."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = ScriptSet.emqlab()
    return _DEFAULT


def execute(conn: redis.Redis, name: str, keys: Sequence[Arg], args: Sequence[Arg] = ()) -> Any:
    """:meth:`ScriptSet.execute` on emqlab's own scripts."""
    return default_scripts().execute(conn, name, keys, args)
