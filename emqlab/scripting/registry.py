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

from emqlab.scripting.rules import compile_script

_FILE_NAME = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9]*)-(?P<numkeys>\d+)\.lua$")
# emqlab's style (``--@include "includes/x.lua"``, relative to the script set's root) and BullMQ's Node style
# (``--- @include "includes/x"``, relative to the including file, ``.lua`` optional).
_INCLUDE = re.compile(rb'^--@include "(?P<path>[A-Za-z0-9_./-]+\.lua)"[ \t]*\r?$'
                      rb'|^---[ \t]*@include[ \t]+"(?P<node>[A-Za-z0-9_./-]+)"[ \t]*\r?$', re.M)

Arg = str | bytes | int | float
#: the file that makes a folder a variant of one script (:meth:`ScriptSet.overlay`)
VARIANT_FILE = "variant.yaml"


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
    here = Path(__file__).resolve().parents[1]  # the emqlab package (this module is emqlab/scripting/)
    installed = here / "lua"
    if (installed / "lib").is_dir() or any(installed.glob("*.lua")):
        return installed
    if (here.parent / "pyproject.toml").is_file():  # a checkout: lua/ sits beside the emqlab/ package
        return here.parent / "lua"
    return installed  # a broken install: the error names the folder the wheel should have filled


def flatten(path: Path, root: Path | None = None, text: bytes | None = None) -> bytes:
    """The script at ``path`` with every include line replaced by that file's text, each file inlined once,
    at its first include — what the server receives. Two styles: emqlab's ``--@include "includes/x.lua"``
    (relative to ``root``, default the script's folder) and BullMQ's Node ``--- @include "includes/x"``
    (relative to the including file, ``.lua`` added when missing; the style of BullMQ's npm releases,
    ``dist/cjs/commands/``). ``text`` stands for the file's own bytes (a variant made from it). Raises
    :class:`ScriptError` for a missing include."""
    root = root or path.parent
    seen: set[str] = set()

    def expand(text: bytes, where: Path) -> bytes:
        def repl(m: re.Match[bytes]) -> bytes:
            if m["node"] is not None:  # BullMQ's Node style: relative to the including file
                name = m["node"].decode()
                target = (where.parent / (name if name.endswith(".lua") else name + ".lua")).resolve()
                shown = m["node"]
            else:
                target = (root / m["path"].decode()).resolve()
                shown = m["path"]
            key = str(target)
            if key in seen:
                return b"-- (" + shown + b" included above)"
            seen.add(key)
            if not target.is_file():
                raise ScriptError(f"{where.name}: included file {shown.decode()} not found "
                                  f"(looked for {target})")
            body = expand(target.read_bytes(), target).rstrip(b"\n")
            return b"-- >>> " + shown + b"\n" + body + b"\n-- <<< " + shown

        return _INCLUDE.sub(repl, text)

    return expand(path.read_bytes() if text is None else text, path)


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
        #: after :meth:`overlay`: the scripts put in place, and the folder's files emqlab never calls
        self.replaced: tuple[str, ...] = ()
        self.skipped: tuple[str, ...] = ()
        #: a live run may send these scripts as EVALSHA even when they are not emqlab's own (:meth:`trusted`)
        self.trust = False

    def trusted(self) -> ScriptSet:
        """This set, marked trusted: on a live server a run sends each of its scripts as one EVALSHA, as it
        sends emqlab's own, instead of running one that is not emqlab's through the Lua host, which keeps
        it to the run's keys (:mod:`emqlab.engine.atomic`). Nothing then keeps such a script from any key of
        the server: only for scripts you wrote or checked. (emqlab's CLI never marks a set trusted.)"""
        out = ScriptSet(dict(self._scripts), self.origin)
        out.replaced, out.skipped, out.trust = self.replaced, self.skipped, True
        return out

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

    def overlay(self, path: str | Path) -> ScriptSet:
        """This set with the scripts at ``path`` — one ``<name>-<numkeys>.lua`` file, or a folder of them —
        in place of the same-named ones (includes resolved from the file's folder, then from this set's
        root folder; a folder's scripts that this set does not have are skipped, as a release's folder
        holds many emqlab never calls). The new set's origin names the path.

        Raises :class:`ScriptError` (one line) for a path that does not exist, a file not named
        ``<name>-<numkeys>.lua``, a folder with no such file, a name this set has no script for, a KEYS
        count that differs from the script it replaces (the callers pass that many, in protocol order;
        ``docs/protocol.md``), an include that cannot be found, or Lua that does not compile."""
        p = Path(path)
        if not p.exists():
            raise ScriptError(f"no script file or folder at {p}")
        if (p / VARIANT_FILE).is_file():
            return self._variant(p / VARIANT_FILE)
        files = sorted(f for f in p.glob("*.lua") if _FILE_NAME.match(f.name)) if p.is_dir() else [p]
        if not files:
            raise ScriptError(f"{p}: no <name>-<numkeys>.lua file in this folder")
        scripts = dict(self._scripts)
        replaced: list[str] = []
        skipped: list[str] = []
        roots = [Path(s.path).parent for s in self._scripts.values() if s.path]
        for f in files:
            m = _FILE_NAME.match(f.name)
            if not m:
                raise ScriptError(f"{f}: a script file is named <name>-<numkeys>.lua (e.g. moveToFinished-14.lua)")
            name, numkeys = m["name"], int(m["numkeys"])
            if name not in scripts:
                if p.is_dir():
                    skipped.append(f.name)  # a release's folder holds scripts emqlab never calls
                    continue
                raise ScriptError(f"{f}: {self.origin}'s set has no script named {name!r} to replace (known: "
                                  f"{', '.join(self._scripts)})")
            base = scripts[name]
            if numkeys != base.numkeys and not (name == "moveStalledJobsToWait" and numkeys == base.numkeys + 1):
                if p.is_dir():  # another protocol version's script: emqlab keeps its own
                    skipped.append(f"{f.name} ({numkeys} KEYS; emqlab calls {name} with {base.numkeys})")
                    continue
                raise ScriptError(f"{f}: declares {numkeys} KEYS, but {base.file_name} takes {base.numkeys}"
                                  " and emqlab calls it with that many, in protocol order")
            try:
                text = flatten(f)
            except ScriptError as own:
                try:  # an include of emqlab's own (``includes/common.lua``): resolve it from this set's root
                    text = flatten(f, roots[0]) if roots else b""
                except ScriptError:
                    text = b""
                if not text:
                    raise ScriptError(f"{f}: {own}") from None
            try:
                compile_script(text)
            except Exception as e:  # noqa: BLE001 - lupa's syntax error, made one line
                raise ScriptError(f"{f}: does not compile: {str(e).splitlines()[0]}") from None
            scripts[name] = Script(name, numkeys, text, str(f))
            replaced.append(name)
        if not replaced:
            raise ScriptError(f"{p}: none of its scripts is one emqlab calls ({', '.join(self._scripts)})")
        out = ScriptSet(scripts, f"{self.origin} + {p}")
        out.replaced, out.skipped = tuple(replaced), tuple(skipped)
        return out

    def _variant(self, spec_path: Path) -> ScriptSet:
        """The set with one script changed as ``variant.yaml`` says: ``script`` (a file of this set, e.g.
        ``moveToFinished-14.lua``), ``replace`` (text that must occur exactly once in its source) and
        ``with`` (what stands there instead). A lesson's variant is one rule changed, kept as that change
        rather than as a second copy of the script."""
        import yaml

        try:
            spec = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise ScriptError(f"{spec_path}: not YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(spec, dict) or not {"script", "replace", "with"} <= set(spec) or \
                not all(isinstance(spec[k], str) for k in ("script", "replace", "with")):
            raise ScriptError(f"{spec_path}: expected the text fields script, replace and with")
        m = _FILE_NAME.match(spec["script"])
        base = self._scripts.get(m["name"]) if m else None
        if base is None or not base.path or base.file_name != spec["script"]:
            raise ScriptError(f"{spec_path}: script {spec['script']!r} is not one of {self.origin}'s")
        source = Path(base.path).read_bytes()
        old, new = spec["replace"].encode(), spec["with"].encode()
        if source.count(old) != 1:
            raise ScriptError(f"{spec_path}: the text to replace occurs {source.count(old)} times in "
                              f"{base.file_name} (it must occur once)")
        text = flatten(Path(base.path), text=source.replace(old, new))
        scripts = dict(self._scripts)
        scripts[base.name] = Script(base.name, base.numkeys, text, str(spec_path))
        out = ScriptSet(scripts, f"{self.origin} + {spec_path.parent}")
        out.replaced = (base.name,)
        return out

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
        ``execute_command``, or :func:`emqlab.backend.executor.command_executor`). The command's arguments are str
        (the command words, the SHA1, KEYS and ARGV given as str), int (the key count) and bytes (an
        ``EVAL`` body), as redis-py's ``execute_command`` takes them.

        A NOSCRIPT reply (the server's script cache lost the script: another client's SCRIPT FLUSH, a
        restart, a failover) is answered with ``EVAL`` of the script's text, as ioredis does: the same
        script, run the same way, that no flush between two commands can miss (it also caches it again)."""
        script = self[name]
        script.check_keys(keys)
        return evalsha(send, script.sha, script.text, keys, args)


def evalsha(send: Callable[..., Any], sha: str | bytes, text: bytes, keys: Sequence[Any],
            args: Sequence[Any]) -> Any:
    """``EVALSHA sha`` through ``send(*command)``; on NOSCRIPT (the server's script cache lost it) ``EVAL``
    of ``text``, as ioredis does (:meth:`ScriptSet.call`). The command words are sent as the SHA1's type
    (str or bytes)."""
    words = ("EVALSHA", "EVAL") if isinstance(sha, str) else (b"EVALSHA", b"EVAL")
    try:
        return send(words[0], sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        return send(words[1], text, len(keys), *keys, *args)


_DEFAULT: ScriptSet | None = None


def default_scripts() -> ScriptSet:
    """emqlab's own script set, loaded once per process."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = ScriptSet.emqlab()
    return _DEFAULT


def shipped(script: Script) -> bool:
    """Whether ``script`` is one of emqlab's own, unchanged (its text's SHA1 is that of the shipped script of
    its name): what a live run may send as one EVALSHA. Any other script — a user's ``--lua``, BullMQ's — runs
    through the Lua host, kept to the run's keys (:meth:`emqlab.engine.runner.Runner`)."""
    try:
        return default_scripts()[script.name].sha == script.sha
    except UnknownScript:
        return False


def execute(conn: redis.Redis, name: str, keys: Sequence[Arg], args: Sequence[Arg] = ()) -> Any:
    """:meth:`ScriptSet.execute` on emqlab's own scripts."""
    return default_scripts().execute(conn, name, keys, args)
