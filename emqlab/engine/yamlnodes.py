"""The home of reading a scenario file's YAML safely: the input limits, the loader (no aliases, a bounded
depth) and :class:`Node`, a YAML node that knows its file, line and field, so that every problem is
reported as one line (:class:`ScenarioError`: ``<file>:<line>: <field>: <problem>``)."""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml


class ScenarioError(ValueError):
    """A scenario file is malformed; ``str(e)`` is one line: ``<file>:<line>: <field>: <problem>``."""


# -- input limits (docs/scenarios.md, "Limits") --------------------------------------------------------------

#: a scenario file is at most this many bytes
MAX_FILE_BYTES = 1_000_000
#: YAML nesting depth of the whole file, and of a job's ``data`` / a worker's ``value``
MAX_YAML_DEPTH = 40
MAX_DATA_DEPTH = 32
#: integers in ``data`` / ``value``: exactly representable in a Lua number (a double)
MAX_DATA_INT = 2**53
#: milliseconds (delay, backoff): about 31 years
MAX_MS = 10**12
#: BullMQ's highest priority (2^21)
MAX_PRIORITY = 2_097_152
#: attempts, max_stalled
MAX_ATTEMPTS = 1_000_000
#: a worker's jobs, fetch_attempts, renewals; a sweep's runs (each is a step or more of every interleaving)
MAX_REPEATS = 100
MAX_PREEMPTIONS = 1_000
#: |score| of delayed / prioritized / completed / failed entries
MAX_SCORE = 1e15
MAX_ACTORS = 50
MAX_JOBS = 1_000
JOB_ID = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
KEEP_JOBS_KEYS = ("count", "age", "limit")


def read_file(path: str | Path, name: str) -> str:
    """The text of the scenario file at ``path`` (``name`` in messages), its size never trusted: anything
    but a regular file (``/dev/zero``, which never ends and says its size is 0; a FIFO, which blocks; a
    folder) is refused before a byte is read, and at most :data:`MAX_FILE_BYTES` + 1 bytes are read, so a
    file that grows or lies about its size is refused too, at once. Raises :class:`ScenarioError`."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)  # (a FIFO's open blocks)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise ScenarioError(f"{name}: cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ScenarioError(f"{name}: not a regular file (a scenario is a YAML file)")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_FILE_BYTES + 1)
        except OSError as e:
            raise ScenarioError(f"{name}: cannot read: {e.strerror or e}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ScenarioError(f"{name}: larger than {MAX_FILE_BYTES:,} bytes (a scenario file is a few dozen lines)")
    try:  # (newlines as a text-mode read gives them: \r\n and \r are \n)
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{name}: not a UTF-8 text file (byte {e.start}: {e.reason})") from None


class Refused(yaml.YAMLError):
    """The safe loader refused the input (an alias, too deep)."""

    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


class SafeLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader composing nodes with aliases refused (no alias bomb: the loader stops at the first
    ``*alias``, before anything is expanded) and the nesting depth bounded (no RecursionError)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise Refused(f"aliases (*{event.anchor}) are not supported in scenario files; write the value out",
                           event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise Refused(f"nested more than {MAX_YAML_DEPTH} levels deep", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class Node:
    """A YAML node with its line, for error messages."""

    def __init__(self, node: yaml.Node, path: str, where: str) -> None:
        self.node = node
        self.path = path
        self.where = where

    @property
    def line(self) -> int:
        return self.node.start_mark.line + 1

    def fail(self, msg: str) -> ScenarioError:
        field_ = f"{self.where}: " if self.where else ""
        return ScenarioError(f"{self.path}:{self.line}: {field_}{msg}")

    def mapping(self, allowed: tuple[str, ...] | None = None) -> dict[str, Node]:
        if not isinstance(self.node, yaml.MappingNode):
            raise self.fail(f"expected a mapping, got {kind_of(self.node)}")
        out: dict[str, Node] = {}
        for k, v in self.node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else None
            if key is None:
                raise Node(k, self.path, self.where).fail("keys must be plain scalars")
            sub = f"{self.where}.{key}" if self.where else key
            if allowed is not None and key not in allowed:
                raise Node(k, self.path, sub).fail(f"unknown key (allowed: {', '.join(allowed)})")
            if key in out:
                raise Node(k, self.path, sub).fail("duplicate key")
            out[key] = Node(v, self.path, sub)
        return out

    def sequence(self) -> list[Node]:
        if not isinstance(self.node, yaml.SequenceNode):
            raise self.fail(f"expected a list, got {kind_of(self.node)}")
        return [Node(v, self.path, f"{self.where}[{i}]") for i, v in enumerate(self.node.value)]

    def scalar(self) -> Any:
        if not isinstance(self.node, yaml.ScalarNode):
            raise self.fail(f"expected a single value, got {kind_of(self.node)}")
        try:
            return yaml.SafeLoader("").construct_object(self.node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as e:  # an unknown !tag, a bad !!timestamp / !!binary
            problem = " ".join(str(getattr(e, "problem", None) or e).split())
            raise self.fail(f"cannot read the value {short(self.node.value)}: {problem}") from None

    def text(self) -> str:
        v = self.scalar()
        if isinstance(v, bool) or v is None or isinstance(v, list | dict):
            raise self.fail(f"expected text, got {v!r}")
        return str(v) if not isinstance(v, bytes) else self.node.value

    def integer(self, minimum: int | None = None, maximum: int | None = None) -> int:
        v = self.scalar()
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(f"expected an integer, got {short(v)}")
        if minimum is not None and v < minimum:
            raise self.fail(f"must be >= {minimum}, got {short(v)}")
        if maximum is not None and v > maximum:
            raise self.fail(f"must be <= {maximum:,}, got {short(v)}")
        return v

    def number(self, limit: float = MAX_SCORE) -> float:
        v = self.scalar()
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(f"expected a number, got {short(v)}")
        if isinstance(v, float) and not math.isfinite(v):
            raise self.fail(f"expected a finite number, got {v}")
        if abs(v) > limit:
            raise self.fail(f"must be between -{limit:g} and {limit:g}, got {short(v)}")
        return float(v)

    def json_value(self, depth: int = 0) -> Any:
        """The node as JSON data: text, a finite number, true/false, null, a list or a mapping with text
        keys — what a job's data and a worker's return value become. Dates, sets, binary and !tags are
        refused, and so is nesting deeper than ``MAX_DATA_DEPTH``."""
        node = self.node
        if depth > MAX_DATA_DEPTH:
            raise self.fail(f"nested more than {MAX_DATA_DEPTH} levels deep")
        if isinstance(node, yaml.SequenceNode):
            if node.tag != "tag:yaml.org,2002:seq":
                raise self.fail(f"expected JSON data, got a {node.tag.rsplit(':', 1)[-1]}")
            return [n.json_value(depth + 1) for n in self.sequence()]
        if isinstance(node, yaml.MappingNode):
            if node.tag != "tag:yaml.org,2002:map":
                raise self.fail(f"expected JSON data, got a {node.tag.rsplit(':', 1)[-1]} (a list or a mapping "
                                "with values fit)")
            out: dict[str, Any] = {}
            for key, value in self.mapping().items():
                if key == "<<":
                    raise self.fail("merge keys (<<) are not supported in scenario files")
                out[key] = value.json_value(depth + 1)
            return out
        v = self.scalar()
        if v is None or isinstance(v, bool | str):
            return v
        if isinstance(v, int):
            if abs(v) > MAX_DATA_INT:
                raise self.fail(f"integers in JSON data are limited to ±2^53, got {short(v)}")
            return v
        if isinstance(v, float):
            if not math.isfinite(v):
                raise self.fail(f"expected JSON data, got {v} (JSON has no infinity or NaN)")
            return v
        raise self.fail(f"expected JSON data (text, a number, true/false, null, a list or a mapping), got "
                        f"a {type(v).__name__} {short(self.node.value)} (quote it to make it text)")

    def boolean(self) -> bool:
        v = self.scalar()
        if not isinstance(v, bool):
            raise self.fail(f"expected true or false, got {v!r}")
        return v

    def choice(self, options: tuple[str, ...], what: str) -> str:
        v = self.text()
        if v not in options:
            raise self.fail(f"unknown {what} {v!r} (one of: {', '.join(options)})")
        return v

    def any(self) -> Any:
        return self.json_value()

    def ids(self) -> list[str]:
        return [n.text() for n in self.sequence()]

    def job_id(self) -> str:
        v = self.text()
        if not JOB_ID.fullmatch(v):
            raise self.fail(f"job ids are 1 to 64 letters, digits, '_', '.' or '-', got {short(v)}")
        return v

    def keep_jobs(self) -> Any:
        """BullMQ's removeOnComplete/removeOnFail: true/false, a count, or {count, age, limit}."""
        if isinstance(self.node, yaml.MappingNode):
            out = {}
            for k, n in self.mapping(KEEP_JOBS_KEYS).items():
                out[k] = n.integer(-1 if k == "count" else 0, MAX_ATTEMPTS if k != "age" else MAX_MS)
            return out
        if isinstance(self.node, yaml.SequenceNode):
            raise self.fail("expected true, false, a count or {count, age, limit}, got a list")
        v = self.scalar()
        if v is None or isinstance(v, bool):
            return v
        if isinstance(v, int):
            return self.integer(-1, MAX_ATTEMPTS)
        raise self.fail(f"expected true, false, a count or {{count, age, limit}}, got {short(v)}")


def short(v: Any, limit: int = 60) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def kind_of(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return short(node.value)


__all__ = ["JOB_ID", "KEEP_JOBS_KEYS", "MAX_ACTORS", "MAX_ATTEMPTS", "MAX_DATA_DEPTH", "MAX_DATA_INT", "MAX_FILE_BYTES",
           "MAX_JOBS", "MAX_MS", "MAX_PREEMPTIONS", "MAX_PRIORITY", "MAX_REPEATS", "MAX_SCORE", "MAX_YAML_DEPTH",
           "Node", "Refused", "SafeLoader", "ScenarioError", "kind_of", "read_file", "short"]
