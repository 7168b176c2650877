"""Write the table of docs/check.md: BullMQ's shipped scripts (the installed Python package, and any Node
release folders given) checked against every shipped scenario, split and atomic, next to emqlab's own.

    python scripts/gen_check_docs.py [NODE_COMMANDS_DIR ...]

Each NODE_COMMANDS_DIR is a release's ``dist/cjs/commands`` folder (``npm pack bullmq@X`` and unpack).
The table goes between the ``emqlab:check`` markers of docs/check.md.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from emqlab.check.lua import check_scripts
from emqlab.engine.scenario import shipped
from emqlab.scripting.registry import ScriptSet, default_scripts

DOCS = Path(__file__).resolve().parent.parent / "docs" / "check.md"
BEGIN, END = "<!-- emqlab:check:begin -->", "<!-- emqlab:check:end -->"


def main(argv: list[str]) -> None:
    folders: list[tuple[str, Path]] = []
    bq = ScriptSet.bullmq()
    folders.append((bq.origin + " (PyPI)", Path(bq["moveToFinished"].path).parent))
    for d in argv:
        parts = Path(d).resolve().parts
        version = parts[-5] if len(parts) > 5 and parts[-4] == "package" else d
        folders.append((f"bullmq {version} (npm)", Path(d)))
    scenarios = shipped()
    lines = [f"Generated {time.strftime('%Y-%m-%d')} by `python scripts/gen_check_docs.py`: each release's scripts"
             " in place of emqlab's, every shipped scenario, split and atomic (only rows that differ from emqlab's"
             " own scripts are shown).", ""]
    for label, folder in folders:
        res = check_scripts(default_scripts().overlay(folder), scenarios)
        other = [x for x in res.skipped if "KEYS" in x]
        kept = f" (emqlab's own script kept where this release's takes other KEYS: {', '.join(other)})" if other \
            else ""
        lines += [f"#### {label}: verdict {res.verdict}", "", f"{res.reason}{kept}.", "",
                  "| scenario | mode | this release | emqlab's scripts |", "|---|---|---|---|"]
        differ = [r for r in res.rows if r.extra or r.missing or r.error]
        for r in differ:
            lines.append(f"| {r.scenario} | {r.mode} | {', '.join(r.yours) or r.error or '–'} | "
                         f"{', '.join(r.reference) or '–'} |")
        if not differ:
            lines.append("| (none) | | | |")
        lines.append("")
    text = DOCS.read_text(encoding="utf-8")
    body = f"{BEGIN}\n" + "\n".join(lines) + f"\n{END}"
    DOCS.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _m: body, text, flags=re.S),
                    encoding="utf-8")
    print(f"wrote {DOCS}")


if __name__ == "__main__":
    main(sys.argv[1:])
