"""MkDocs hooks: pages generated from the code at build time, so they cannot drift from it.

* ``<!-- emqlab:cli -->`` (docs/cli.md) becomes the ``--help`` of the ``emqlab`` group and of every command,
  rendered by click itself;
* ``<!-- emqlab:scenarios -->`` (docs/scenarios.md) becomes the scenario catalogue: one section per file in
  ``emqlab/scenarios/``, with its lesson, public sources, actors, initial state, expected outcome per mode
  and the YAML itself;
* ``<!-- emqlab:atlas -->`` (docs/atlas.md) becomes the race atlas: the scenarios of queue projects other
  than BullMQ, per project, each report with its mechanism, the replay line of emqlab's witness and the
  variant without the race, and ``figures/atlas-<project>.svg``, the timeline of one witness per project.

``on_config`` also adds the round-trip page to the navigation when ``docs/round-trips.md`` exists.

Figures and data, generated from the package at build time (never committed, never drawn by hand):
``on_files`` adds them to the site as virtual files — nothing is written into ``docs/``:

* ``figures/tutorial-timeline.svg`` — the witness ``emqlab simulate --split`` prints (``stalled-finish``), as
  :func:`emqlab.plots.plot_timeline` draws it; ``figures/tutorial-atomic.svg`` — the atomic run;
* ``figures/concepts-interleavings.svg`` — interleavings, runs and anomalous interleavings per scenario and
  mode (:func:`emqlab.plots.plot_interleavings`);
* ``figures/round-trips-rate.svg`` and ``figures/round-trips-cost.svg`` — anomaly rate, round trips per job
  and jobs/s against RTT (:func:`emqlab.plots.plot_rate`, :func:`~emqlab.plots.plot_cost`), from the
  sweep that ``<!-- emqlab:sweep-command -->`` names;
* ``assets/rtt-sweep.json`` — the same sweep's rows (what ``emqlab sweep-rtt --csv`` writes), read by the
  round-trip slider (``docs/slider.md``, ``docs/assets/slider.js``); ``<!-- emqlab:rtt-data -->`` embeds
  it in the page so that the slider works offline and from ``file://``.

The sweep is small (:data:`SWEEP`; smaller still with ``$EMQLAB_FAST``, as in the test suite) and everything
generated is cached in ``$EMQLAB_DOCS_CACHE`` (default: a folder in the temp dir) under a hash of the
package's sources, so a second build is as fast as one without figures.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CLI_MARK = "<!-- emqlab:cli -->"
SCENARIOS_MARK = "<!-- emqlab:scenarios -->"
ACL_MARK = "<!-- emqlab:acl -->"
SWEEP_COMMAND_MARK = "<!-- emqlab:sweep-command -->"
RTT_DATA_MARK = "<!-- emqlab:rtt-data -->"
LAYERS_MARK = "<!-- emqlab:layers -->"
ATLAS_MARK = "<!-- emqlab:atlas -->"
MOVED_MARK = "<!-- emqlab:moved -->"
OPTIONAL_PAGES = [("Round trips", "round-trips.md", "Concepts")]
ROOT = Path(__file__).resolve().parents[1]
#: The docs' sweep over RTT (every finish mode at each RTT; TimingConfig's defaults otherwise). Small, because
#: the build runs in the test suite; ``$EMQLAB_FAST`` makes it smaller still.
SWEEP = {"rtts": (0.03, 0.05, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 75.0, 150.0, 250.0), "jobs": 16,
         "workers": 8, "seed": 0}
SWEEP_FAST = {"rtts": (0.05, 1.0, 5.0, 20.0, 75.0), "jobs": 8, "workers": 8, "seed": 0}
#: The scenarios and modes of the interleaving-count figure.
COUNTS = (("stalled-finish", ("split", "transaction", "atomic")), ("fetch-loop", ("split", "transaction", "atomic")))


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


def on_files(files: Any, config: Any, **_: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, content in generated().items():
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, content=content))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if SWEEP_COMMAND_MARK in markdown:
        markdown = markdown.replace(SWEEP_COMMAND_MARK, f"`{sweep_command()}`")
    if RTT_DATA_MARK in markdown:
        text = generated()["assets/rtt-sweep.json"].decode()
        markdown = markdown.replace(RTT_DATA_MARK, '<script type="application/json" id="rtt-data">'
                                    + text.replace("</", "<\\/") + "</script>")
    if CLI_MARK in markdown:
        markdown = markdown.replace(CLI_MARK, cli_reference())
    if SCENARIOS_MARK in markdown:
        markdown = markdown.replace(SCENARIOS_MARK, scenario_catalogue())
    if ACL_MARK in markdown:
        from emqlab.scripting import acl

        markdown = markdown.replace(ACL_MARK, acl.markdown())
    if LAYERS_MARK in markdown:
        markdown = markdown.replace(LAYERS_MARK, layers_table())
    if ATLAS_MARK in markdown:
        markdown = markdown.replace(ATLAS_MARK, atlas_page())
    if MOVED_MARK in markdown:
        from emqlab._moved import MOVED

        rows = ["| old path | the module that holds its code |", "|---|---|"]
        rows += [f"| `{old}` | `{new}` |" for old, new in sorted(MOVED.items())]
        markdown = markdown.replace(MOVED_MARK, "\n".join(rows))
    return markdown


def on_post_build(config: Any, **_: Any) -> None:
    """With ``$EMQLAB_DOCS_BROWSER=1``, the browser site (``scripts/site/build.py``: the levels and the slider
    under Pyodide, ``docs/browser.md``) is built into the docs site's ``play/`` folder. Off by default: it
    needs Node's npm and PyPI the first time, and the test suite builds the docs often."""
    if os.environ.get("EMQLAB_DOCS_BROWSER", "").lower() in ("", "0", "false", "no"):
        return
    import runpy

    site = runpy.run_path(str(ROOT / "scripts" / "site" / "build.py"))
    done = site["build"](Path(config["site_dir"]) / "play")
    print(f"emqlab docs: browser site in play/ ({done['files']} files, {done['bytes'] / 1e6:.1f} MB)")


# -- the CLI reference ---------------------------------------------------------------------------------------


def cli_reference() -> str:
    import click

    from emqlab.ui.cli import main

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
        how = f"mode: {a.mode}" if a.mode else "split in split runs, else atomic"
        bits.append(f"fails job {a.job} from outside (token \"0\", {how})")
    elif a.kind == "python":
        bits.append(f"the Python function `{a.python}`")
        if a.params:
            bits.append("with " + ", ".join(f"{k}={v}" for k, v in a.params.items()))
        if a.adds:
            bits.append(f"adds job {', '.join(a.adds)}")
        if a.mode:
            bits.append(f"mode: {a.mode}")
    elif a.kind in ("crash", "disconnect", "script-flush", "restart"):
        bits.append(f"a fault{f' of {a.of}' if a.of else ''}")
    if a.script:
        bits.append(f"runs its own script `{a.script.rsplit('/lua/', 1)[-1]}`")
    return bits[0] + (" — " + ", ".join(bits[1:]) if len(bits) > 1 else "")


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
    for place in sc.places:  # a scenario's own places (places:)
        index = f", a place while {place.index} holds {place.member}" if place.index else ""
        parts.append(f"{place.key} [{', '.join(place.jobs)}]{index}")
    return "; ".join(parts) or "empty queue"


def scenario_catalogue() -> str:
    from emqlab.engine.scenario import shipped

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


# -- figures and the slider's data -------------------------------------------------------------------------------


def _fast() -> bool:
    return os.environ.get("EMQLAB_FAST", "").lower() not in ("", "0", "false", "no")


def sweep_params() -> dict[str, Any]:
    return dict(SWEEP_FAST if _fast() else SWEEP)


def sweep_command() -> str:
    """The ``emqlab sweep-rtt`` command that prints the numbers behind the figures and the slider."""
    p = sweep_params()
    rtts = ",".join(f"{x:g}" for x in p["rtts"])
    return f"emqlab sweep-rtt --rtt {rtts} --jobs {p['jobs']} --workers {p['workers']} --seed {p['seed']}"


def _source_hash() -> str:
    """A hash of everything the generated files depend on: the package, the Lua scripts, this file, the
    parameters and the plotting library's version."""
    import matplotlib

    h = hashlib.sha256()
    h.update(json.dumps([sweep_params(), COUNTS, matplotlib.__version__], sort_keys=True).encode())
    paths = [Path(__file__).resolve()]
    for folder, patterns in ((ROOT / "emqlab", ("*.py", "*.yaml", "*.json")), (ROOT / "lua", ("*.lua",))):
        for pattern in patterns:
            paths += sorted(folder.rglob(pattern))
    for path in paths:
        h.update(str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:20]


_generated: dict[str, bytes] = {}


def generated() -> dict[str, bytes]:
    """Site path → content of every generated file (computed once per source hash, cached on disk)."""
    if _generated:
        return _generated
    key = _source_hash()
    cache = Path(os.environ.get("EMQLAB_DOCS_CACHE") or Path(tempfile.gettempdir()) / "emqlab-docs-cache")
    path = cache / f"{key}.json"
    with _locked(cache / f"{key}.lock"):  # two builds at once (the test suite's): the second waits, then reads
        if path.exists():
            try:
                stored = json.loads(path.read_text())
                _generated.update({k: v.encode() for k, v in stored.items()})
                return _generated
            except (OSError, ValueError):
                pass
        started, cpu = time.perf_counter(), time.process_time()
        out = _make()
        _generated.update(out)
        try:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({k: v.decode() for k, v in out.items()}))
            os.replace(tmp, path)
        except OSError:
            pass
    if os.environ.get("EMQLAB_DOCS_VERBOSE"):
        print(f"emqlab docs: figures and data generated in {time.perf_counter() - started:.1f} s"
              f" ({time.process_time() - cpu:.1f} s CPU)")
    return _generated


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (POSIX ``flock``; no lock where there is none, or the folder is not
    writable)."""
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")  # closed below
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        handle.close()


def _make() -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    from emqlab.backend.connect import connect
    from emqlab.engine.scenario import load
    from emqlab.explore import explore
    from emqlab.explore.checked import Runner
    from emqlab.timing import MODES, PRESETS, TimingConfig, sweep_rtt
    from emqlab.ui import plots

    out: dict[str, bytes] = {}
    conn = connect()
    # the tutorial: the witness `emqlab simulate --split` prints, and the atomic run
    sc = load("stalled-finish")
    reports = {(name, mode): explore(load(name), mode, conn=conn) for name, modes in COUNTS for mode in modes}
    witness = reports[("stalled-finish", "split")].witnesses["double-placement"]
    out["figures/tutorial-timeline.svg"] = plots.to_svg(plots.plot_timeline(plots.timeline_data(witness))).encode()
    with Runner(sc, "atomic", conn) as r:
        atomic = r.run()
    out["figures/tutorial-atomic.svg"] = plots.to_svg(plots.plot_timeline(plots.timeline_data(atomic))).encode()
    # concepts: how many interleavings, how many runs, how many go wrong
    labels = [f"{name}\n{mode}" for name, mode in reports]
    counts = plots.interleaving_data(list(reports.values()), labels)
    out["figures/concepts-interleavings.svg"] = plots.to_svg(plots.plot_interleavings(counts)).encode()
    # round trips: one sweep for the figures and the slider
    p = sweep_params()
    sweep = sweep_rtt(p["rtts"], MODES, TimingConfig(jobs=p["jobs"], workers=p["workers"], seed=p["seed"]), conn)
    out["figures/round-trips-rate.svg"] = plots.to_svg(plots.plot_rate(plots.rate_data(sweep))).encode()
    out["figures/round-trips-cost.svg"] = plots.to_svg(plots.plot_cost(plots.cost_data(sweep))).encode()
    data = {"command": sweep_command(), "modes": list(sweep.modes), "rtts": list(sweep.rtts),
            "presets": dict(PRESETS), "config": sweep.config, "rows": sweep.rows()}
    out["assets/rtt-sweep.json"] = json.dumps(data, indent=1, sort_keys=True).encode()
    out["figures/architecture-layers.svg"] = plots.to_svg(layers_figure()).encode()
    out.update(atlas_files(conn))
    return out


# -- the architecture page: the layers of emqlab/ ---------------------------------------------------------


def layer_modules() -> dict[str, list[str]]:
    """Folder of ``emqlab/`` → its modules (file names without ``.py``; ``__init__`` and private ones left out),
    in :data:`emqlab.layers.LAYERS` order."""
    from emqlab.layers import LAYERS

    pkg = ROOT / "emqlab"
    return {folder: sorted(p.stem for p in (pkg / folder).glob("*.py") if not p.stem.startswith("_"))
            + sorted(f"{p.name}/" for p in (pkg / folder).iterdir() if (p / "__init__.py").is_file())
            for _, folder, _ in LAYERS}


def layers_table() -> str:
    """The layers as a Markdown table, top layer first (what a reader meets first is the face)."""
    from emqlab.layers import LAYERS

    mods = layer_modules()
    rows = ["| rank | folder | holds | modules |", "|---:|---|---|---|"]
    for rank, folder, holds in reversed(LAYERS):
        rows.append(f"| {rank} | `{folder}/` | {holds} | {', '.join(f'`{m}`' for m in mods[folder])} |")
    return "\n".join(rows)


def layers_figure() -> Any:
    """The layers as stacked bands, bottom to top, each with its modules; imports point down."""
    import textwrap

    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    from emqlab.layers import LAYERS

    mods = layer_modules()
    ranks = sorted({r for r, _, _ in LAYERS})
    band = 0.95
    fig, ax = plt.subplots(figsize=(9, band * len(ranks) + 0.4))
    ax.set_xlim(0, 9)
    ax.set_ylim(-0.1, len(ranks) * band + 0.05)
    ax.axis("off")
    for rank in ranks:
        row = [(f, h) for r, f, h in LAYERS if r == rank]
        width = 8.2 / len(row)
        for i, (folder, _) in enumerate(row):
            x, y = 0.75 + i * width, rank * band + 0.05
            ax.add_patch(FancyBboxPatch((x + 0.04, y), width - 0.08, band - 0.1,
                                        boxstyle="round,pad=0.0,rounding_size=0.08",
                                        facecolor=plt.cm.Purples(0.12 + 0.06 * rank), edgecolor="#5b3f8c", lw=1))
            ax.text(x + 0.15, y + band - 0.27, f"{folder}/", fontsize=11, fontweight="bold", va="center")
            chars = max(20, int((width - 0.3) / 0.085))  # about how many 9 pt characters fit
            lines = textwrap.wrap(", ".join(mods[folder]), chars)[:2]
            ax.text(x + 0.15, y + 0.27, "\n".join(lines), fontsize=9, va="center", color="#333333",
                    linespacing=1.3)
    top = len(ranks) * band
    ax.add_patch(FancyArrowPatch((0.35, top - 0.1), (0.35, 0.1), arrowstyle="-|>", mutation_scale=14,
                                 color="#5b3f8c", lw=1.5))
    ax.text(0.18, top / 2, "imports go down", rotation=90, va="center", ha="center", fontsize=10,
            color="#5b3f8c")
    fig.tight_layout()
    return fig


# -- the race atlas (docs/atlas.md) -----------------------------------------------------------------------------


#: what each atlas project's scenarios run: its released code, or a model in emqlab's own words (each
#: scenario file says which in its header; a project missing here fails the docs' test)
ATLAS_CODE = {
    "rq": "RQ 1.16.2's released code from PyPI, run unmodified, its key prefixes set to the run's base "
          "(rq-intermediate-cleanup models 1.16.0's cleanup loop, as its file says)",
    "dramatiq": "dramatiq 2.2.1's Redis broker script (`dispatch.lua`) from PyPI, read from the installed package "
                "and sent unmodified, one EVAL per step, its namespace under the run's base",
    "arq": "modelled: arq's commands in emqlab's own words (its keys are fixed module constants and its worker "
           "awaits timers, so its released code cannot run under the scheduler)",
    "saq": "modelled: SAQ's commands in emqlab's own words (fixed `saq:` keys, a blocking dequeue and PUBLISH)",
    "asynq": "modelled: asynq's scripts in emqlab's own Lua (`lua/atlas/asynq/`), from the protocol's facts "
             "(Go modules are out of this project's reach at run time)",
    "laravel": "modelled: Laravel's Redis queue's scripts in emqlab's own Lua (`lua/atlas/laravel/`)",
    "horizon": "modelled: Horizon's commands in emqlab's own Lua (`lua/atlas/laravel/`)",
    "sidekiq": "modelled: Sidekiq's scheduled-set poller in emqlab's own Lua (`lua/atlas/sidekiq/`)",
}


def _atlas_scenarios() -> list[Any]:
    from emqlab.engine.scenario import shipped

    return [sc for sc in shipped() if sc.project != "bullmq"]


def _unsafe_and_fixed(sc: Any) -> tuple[list[str], list[str]]:
    """The scenario's modes whose exhaustive exploration finds an anomaly, and those where it finds none."""
    unsafe = [m for m in sc.modes if sc.expect.get(m) is not None and sc.expect[m].anomalies]
    fixed = [m for m in sc.modes if sc.expect.get(m) is not None and not sc.expect[m].anomalies]
    return unsafe, fixed


def atlas_files(conn: Any) -> dict[str, bytes]:
    """``assets/atlas.json`` (per project: each scenario's witness of its first unsafe mode's first expected
    kind, as mode, kind and schedule) and ``figures/atlas-<project>.svg`` (the timeline of the project's
    first witness)."""
    from emqlab.explore import explore
    from emqlab.ui import plots

    out: dict[str, bytes] = {}
    data: dict[str, Any] = {}
    for sc in _atlas_scenarios():
        unsafe, _ = _unsafe_and_fixed(sc)
        if not unsafe:
            continue
        mode = unsafe[0]
        report = explore(sc, mode, conn=conn)
        kind = next((k for k in sc.expect[mode].anomalies if k in report.witnesses), None)
        if kind is None:
            continue
        w = report.witnesses[kind]
        project = data.setdefault(sc.project, {"witnesses": {}})
        kinds = sorted({a["kind"] for a in w.anomalies})  # (every kind the witness shows, the named one first)
        project["witnesses"][sc.name] = {"mode": mode, "kind": kind, "schedule": w.schedule,
                                         "kinds": [kind, *(k for k in kinds if k != kind)]}
        if "figure" not in project:
            uri = f"figures/atlas-{sc.project}.svg"
            out[uri] = plots.to_svg(plots.plot_timeline(plots.timeline_data(w))).encode()
            project.update(figure=uri, caption=f"{sc.name}, {mode}: the witness of {kind}")
    out["assets/atlas.json"] = json.dumps(data, indent=1, sort_keys=True).encode()
    return out


def atlas_page() -> str:
    """The atlas's tables, one per queue project (see :func:`atlas_files`)."""
    data = json.loads(generated()["assets/atlas.json"])
    lib = _atlas_scenarios()
    projects = sorted({sc.project for sc in lib})
    n_reports = len({s.split(" ", 1)[0] for sc in lib for s in sc.source})
    out = [f"{len(lib)} scenarios from {n_reports} public reports of {len(projects)} queue projects: "
           f"{', '.join(projects)}. `emqlab scenarios --project NAME` lists one project's, "
           "`emqlab simulate -s NAME` explores one.", ""]
    for project in projects:
        shown = data.get(project, {})
        out += [f"## {project}", "", f"Code: {ATLAS_CODE[project]}.", ""]
        if shown.get("figure"):
            out += [f"![{shown['caption']}]({shown['figure']})", "", f"*{shown['caption']}*", ""]
        out += ["| report | scenario and mechanism | emqlab's witness | without the race |", "|---|---|---|---|"]
        for sc in (s for s in lib if s.project == project):
            unsafe, fixed = _unsafe_and_fixed(sc)
            w = shown.get("witnesses", {}).get(sc.name)
            witness = (f"`{w['kind']}` ({w['mode']}): `emqlab replay '{w['schedule']}' --{w['mode']} -s {sc.name}`"
                       if w else ", ".join(unsafe) or "—")
            fix = ", ".join(f"`{m}`" for m in fixed) or "—"
            reports = "<br>".join(_link_sources(s) for s in sc.source) or "—"
            out.append(f"| {reports} | [{sc.name}](scenarios.md#{sc.name}): {sc.title} | {witness} | {fix} |")
        out.append("")
    return "\n".join(out)
