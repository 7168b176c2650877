"""The home of ``python: module:function`` references: the function a scenario's Python actor names.

The scenario loader checks a reference when it reads the file (so a typo is reported with the file and the
line), and the Python-actor driver (:mod:`emqlab.engine.pyactors`) resolves it again when the actor runs.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def resolve(target: Any, base_dir: str | Path | None = None,
            takes: str = "(r, q): the client and the actor's handle") -> Callable[..., Any]:
    """The function a ``python:`` actor (or rule) names: a callable as is, or ``"module:function"``
    (``module`` may be dotted; it is imported with ``base_dir`` — the scenario file's folder — first on
    ``sys.path``). It must take two arguments (``takes`` says which, for the message). Raises
    ``ValueError`` with the reason (not importable, no such function, not callable, wrong signature)."""
    if callable(target):
        fn = target
    else:
        text = str(target)
        mod_name, sep, attr = text.partition(":")
        if not sep or not mod_name or not attr:
            raise ValueError(f"expected 'module:function', got {text!r}")
        added = False
        if base_dir is not None and str(base_dir) not in sys.path:
            sys.path.insert(0, str(base_dir))
            added = True
        try:
            module = importlib.import_module(mod_name)
        except Exception as e:  # noqa: BLE001 - any import failure is the user's, told in one line
            raise ValueError(f"cannot import {mod_name!r}: {type(e).__name__}: {e}") from None
        finally:
            if added:
                sys.path.remove(str(base_dir))
        fn = module
        for part in attr.split("."):
            if not hasattr(fn, part):
                raise ValueError(f"module {mod_name!r} has no {attr!r}")
            fn = getattr(fn, part)
        if not callable(fn):
            raise ValueError(f"{text!r} is not a function")
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise ValueError(f"{getattr(fn, '__name__', fn)!r} must take two arguments {takes}") from None
    except ValueError:  # a builtin without a signature
        pass
    return fn


__all__ = ["resolve"]
