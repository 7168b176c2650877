"""MkDocs hooks: pages generated from the code at build time, so they cannot drift from it.

* ``<!-- emqlab:cli -->`` (docs/cli.md) becomes the ``--help`` of the ``emqlab`` group and of every command,
  rendered by click itself;
* ``<!-- emqlab:scenarios -->`` (docs/scenarios.md) becomes the scenario catalogue: one section per file in
  ``emqlab/scenarios/``, with its lesson, public sources, actors, initial state, expected outcome per mode
  and the YAML itself.

``on_config`` also adds the round-trip page to the navigation when ``docs/round-trips.md`` exists.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

CLI_MARK = "<!-- emqlab:cli -->"
SCENARIOS_MARK = "<!-- emqlab:scenarios -->"
ACL_MARK = "<!-- emqlab:acl -->"
OPTIONAL_PAGES = [("Round trips", "round-trips.md", "Concepts")]


def _pages(nav: Any) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, dict):
        return set().union(*(_pages(v) for v in nav.values())) if nav else set()
    if isinstance(nav, list):
        return set().union(*(_pages(v) for v in nav)) if nav else set()
    return set()


def on_config(config: Any, **_: Any) -> Any:
    docs = Path(config["docs_dir"])
    nav = config.get("nav") or []
    for title, page, after in OPTIONAL_PAGES:
        if not (docs / page).exists() or page in _pages(nav):
            continue
        at = next((i for i, x in enumerate(nav) if isinstance(x, dict) and after in x), len(nav) - 1)
        nav.insert(at + 1, {title: page})
    return config


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if CLI_MARK in markdown:
        markdown = markdown.replace(CLI_MARK, cli_reference())
    if SCENARIOS_MARK in markdown:
        markdown = markdown.replace(SCENARIOS_MARK, scenario_catalogue())
    if ACL_MARK in markdown:
        from emqlab import acl

        markdown = markdown.replace(ACL_MARK, acl.markdown())
    return markdown


# -- the CLI reference ---------------------------------------------------------------------------------------


def cli_reference() -> str:
    import click

    from emqlab.cli import main

    root = click.Context(main, info_name="emqlab", terminal_width=100, max_content_width=100)
    parts = ["## emqlab", "", "```text", main.get_help(root).rstrip(), "```", ""]
    for name in main.list_commands(root):
        cmd = main.get_command(root, name)
        if cmd is None or cmd.hidden:
            continue
        ctx = click.Context(cmd, info_name=name, parent=root, terminal_width=100, max_content_width=100)
        parts += [f"## emqlab {name}", "", cmd.get_short_help_str(limit=120), "", "```text",
                  cmd.get_help(ctx).rstrip(), "```", ""]
    return "\n".join(parts)


# -- the scenario catalogue ----------------------------------------------------------------------------------

_ISSUE = re.compile(r"\b([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)#(\d+)")


def _link_sources(text: str) -> str:
    """``owner/repo#123`` → a link to the issue (GitHub redirects issue numbers of pull requests)."""
    return _ISSUE.sub(lambda m: f"[{m[0]}](https://github.com/{m[1]}/{m[2]}/issues/{m[3]})", text)


def _actor(a: Any) -> str:
    bits = [f"`{a.id}` {a.kind}"]
    if a.kind == "worker":
        bits.append(f"holds job {a.holds}" if a.holds else "fetches a job")
        bits.append(f"finish: {a.finish}")
        bits.append(f"mode: {a.mode}" if a.mode else "finishes in the mode being explored")
        if a.jobs > 1:
            bits.append(f"{a.jobs} jobs")
        if a.keep_jobs is not None:
            bits.append(f"keepJobs {a.keep_jobs}")
        if a.renewals:
            bits.append(f"{a.renewals} renewal(s)")
    elif a.kind == "sweep":
        bits.append(f"mode: {a.mode or 'atomic'}")
        bits.append(f"maxStalledCount {a.max_stalled}")
        if a.runs > 1:
            bits.append(f"{a.runs} runs")
    elif a.kind == "lease":
        bits.append(f"job {a.job}'s lock of {a.of} lapses")
    elif a.kind == "producer":
        bits.append(f"adds job {a.job}")
    elif a.kind == "canceller":
        bits.append(f"fails job {a.job} from outside (token \"0\", mode: {a.mode or 'atomic'})")
    return bits[0] + " — " + ", ".join(bits[1:])


def _state(sc: Any) -> str:
    parts = []
    for name, v in sc.state.items():
        if isinstance(v, dict):
            shown = (f"{j} (due +{s:g} ms)" if name == "delayed" else str(j) for j, s in v.items())
            parts.append(f"{name} " + ", ".join(shown))
        elif v:
            parts.append(f"{name} [{', '.join(v)}]")
    if sc.locks:
        parts.append("locks " + ", ".join(f"{j}: {w}" for j, w in sc.locks.items()))
    if sc.meta:
        parts.append("meta " + ", ".join(f"{k}={v}" for k, v in sc.meta.items()))
    if sc.metrics:
        parts.append("metrics on")
    return "; ".join(parts) or "empty queue"


def scenario_catalogue() -> str:
    from emqlab.scenario import shipped

    lib = shipped()
    out = ["| scenario | headline anomaly (split) | atomic | source |", "|---|---|---|---|"]
    for sc in lib:
        atomic = sc.expect.get("atomic")
        atomic_text = ", ".join(atomic.anomalies) if atomic and atomic.anomalies else ("none" if atomic else "—")
        out.append(f"| [{sc.name}](#{sc.name}) | {sc.anomaly} | {atomic_text} | "
                   f"{_link_sources(sc.source[0]) if sc.source else ''} |")
    out.append("")
    for sc in lib:
        out += [f"## {sc.name}", "", f"**{sc.title}** — headline anomaly: `{sc.anomaly}`", "",
                sc.lesson, "", "**Sources:** " + "; ".join(_link_sources(s) for s in sc.source), "",
                f"**Initial state:** {_state(sc)}", "", "**Actors:**", ""]
        out += [f"- {_actor(a)}" for a in sc.actors]
        out += ["", "| mode | anomaly kinds exhaustive exploration finds | return codes that must appear |",
                "|---|---|---|"]
        for mode in sc.modes:
            e = sc.expect.get(mode)
            anomalies = ", ".join(f"`{k}`" for k in e.anomalies) if e and e.anomalies else "none"
            codes = "; ".join(f"{w}: {', '.join(str(c) for c in cs)}" for w, cs in e.codes.items()) if e else ""
            out.append(f"| {mode} | {anomalies} | {codes or '—'} |")
        bound = f" (the file bounds exploration at {sc.preemptions} preemptions)" if sc.preemptions is not None else ""
        out += ["", f"Run it: `emqlab simulate --split --scenario {sc.name}`{bound}.", ""]
        path = Path(__file__).resolve().parents[1] / "emqlab" / "scenarios" / f"{sc.name}.yaml"
        if path.exists():
            out += [f'??? note "{sc.name}.yaml"', "", "    ```yaml"]
            out += [f"    {line}".rstrip() for line in path.read_text().splitlines()]
            out += ["    ```", ""]
    return "\n".join(out)
