"""Run under Pyodide by ``scripts/site/build.py`` (through ``scripts/pyodide/harness.py``, which installs the
same files the site bundles): compiles the packages the pages import to Pyodide's bytecode and prints them as
one base64 zip (``__pycache__/*.cpython-3XX.pyc`` paths relative to site-packages). Unchecked-hash pyc
files: Python loads them without comparing the source's time, which an unpacked archive does not keep, so the
browser skips compiling these modules at every start."""

import base64
import compileall
import io
import py_compile
import site
import zipfile
from pathlib import Path

#: the packages the levels and the slider import (the rest of the bundle is compiled on import, if ever)
PACKAGES = ("emqlab", "fakeredis", "redis", "yaml", "msgpack", "sortedcontainers", "typing_extensions.py")

root = Path(site.getsitepackages()[0])
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
    for name in PACKAGES:
        path = root / name
        mode = py_compile.PycInvalidationMode.UNCHECKED_HASH
        if path.is_dir():
            compileall.compile_dir(path, quiet=1, invalidation_mode=mode)
        else:
            compileall.compile_file(path, quiet=1, invalidation_mode=mode)
    for pyc in sorted(root.rglob("*.pyc")):
        rel = pyc.relative_to(root)
        if rel.parts[0] in {p.removesuffix(".py") for p in PACKAGES} or rel.parts[0] == "__pycache__":
            z.writestr(rel.as_posix(), pyc.read_bytes())
print(base64.b64encode(buf.getvalue()).decode())
