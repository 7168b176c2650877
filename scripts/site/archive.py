"""The site's zip archives (``emqlab.zip``, the wheels of ``lite/``): written the same way every time, so the
same files give the same bytes (and the same hash in the manifest and the lock)."""

from __future__ import annotations

import zipfile
from pathlib import Path

#: every entry's date (a fixed one: a rebuild of the same files changes no byte)
ZIP_DATE = (2020, 1, 1, 0, 0, 0)


def write_zip(out: Path, files: dict[str, bytes], compresslevel: int) -> None:
    """Write ``files`` (archive path → bytes) to ``out``, sorted by path, deflated at ``compresslevel``,
    each entry dated :data:`ZIP_DATE` with mode 0644."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=compresslevel) as z:
        for name, data in sorted(files.items()):
            info = zipfile.ZipInfo(name, ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, data)
