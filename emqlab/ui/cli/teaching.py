"""The home of the classroom commands: ``emqlab grade`` (a notebook or a folder of them), ``emqlab student``
(the student version of an assignment) and ``emqlab play`` (the levels where you are the scheduler)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click
from rich.text import Text

from emqlab.protocol.verdict import ExitCode
from emqlab.ui.cli.common import _columns, _errors, _fail, _say, _wide_option, console, err_console


@click.command()
@click.argument("notebook", type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True,
              help="Print the grade as JSON: every graded cell, its points and feedback.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write one CSV row per notebook to this file ('-' for stdout; the default for a folder).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=120, show_default=True,
              help="Seconds a notebook may run before it is stopped.")
@click.option("--memory-mb", type=click.IntRange(min=256), default=1536, show_default=True,
              help="Address space a notebook may use.")
@click.option("--jobs", "-j", type=click.IntRange(1, 256), default=None,
              help="A folder: notebooks graded at once, each in its own process (default: the cores).")
@click.option("--feedback", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="A folder: write each student's reports to DIR/<student>.txt, to hand back (default: "
                   "beside the CSV file, grades.csv → grades-feedback/).")
@click.option("--key", type=click.Path(exists=True, file_okay=False), default=None, metavar="DIR",
              help="The answer key: the instructor/ folder of `emqlab workshop` (the source notebooks). "
                   "Default: $EMQLAB_KEY, else the checkout's notebooks/assignments.")
@_wide_option
def grade(notebook: str, as_json: bool, csv_path: str | None, timeout_s: float, memory_mb: int,
          jobs: int | None = None, feedback: str | None = None, key: str | None = None, wide: bool = False) -> None:
    """Grade a classroom assignment notebook, or every notebook in a folder, without nbgrader.

    The notebook's code runs in a separate, limited process (time, memory, no network, no processes, its own
    temporary folder); only its answers come back, as plain data, and every score is computed here:
    replays, exhaustive explorations and seeded timed runs, so the same notebook always gets the same
    grade. Test cells never run, and locked cells run as released. A cell scores all its points or none,
    with feedback that says what is wrong and where to look.

    NOTEBOOK may be a folder: every *.ipynb below it is graded (--jobs at a time) and written as CSV, one
    row per notebook (student = the first folder below NOTEBOOK), and each student's reports to one
    feedback file, to hand back: beside the CSV file (--csv grades.csv: grades-feedback/<student>.txt),
    or in --feedback DIR.

    The installed package holds no answer: expected values are computed here, on hidden variants, and the
    few no run can give (a yes/no question, the model of a3) come from the answer key, --key DIR (the
    instructor/ folder `emqlab workshop` writes). Without a key, those cells score 0 with a note.

    \b
    Exit status: 0 full marks (every notebook), 1 below full marks (a grade was given), 2 cannot grade
    (not a notebook, not an assignment).

    \b
    Examples:
      emqlab grade notebooks/assignments/a1-double-placement.ipynb
      emqlab grade submitted/ada/a2-repair-finish.ipynb --json
      emqlab grade submitted/ --key kit/instructor --csv grades.csv
    """
    from emqlab.teaching.grading import EXIT_CANNOT_GRADE, GradingError, feedback_width, grade_notebook
    from emqlab.teaching.key import find_key
    from emqlab.teaching.sandbox import Limits

    limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb)
    try:
        the_key = find_key(key)
    except GradingError as e:
        _fail(str(e), ExitCode(EXIT_CANNOT_GRADE))
    if os.path.isdir(notebook):
        _grade_folder(notebook, csv_path or "-", limits, jobs, feedback, the_key)
        return
    width = _columns(wide)
    try:
        with feedback_width(width):
            report = grade_notebook(notebook, limits=limits, key=the_key)
    except GradingError as e:
        _fail(str(e), ExitCode(EXIT_CANNOT_GRADE))
    if csv_path is not None:
        from emqlab.teaching.classroom import Row, write_csv

        row = Row(os.path.splitext(os.path.basename(notebook))[0], notebook, report.assignment, report.score,
                  report.max_score, cells={c.grade_id: c.points for c in report.cells})
        with click.open_file(csv_path, "w") as f:
            write_csv([row], f)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        sys.exit(report.exit_code)
    _print_grade(report, notebook, width)
    sys.exit(report.exit_code)


def _print_grade(report: Any, notebook: str, width: int | None) -> None:
    """A grade report as `emqlab grade` prints it, fitted to ``width``: each cell's line, then its feedback
    indented under it (its sentences wrapped there, a witness in it as the grader rendered it)."""
    from emqlab.teaching.grading import FEEDBACK_INDENT, feedback_block

    _say(Text.assemble(("emqlab grade", "bold"), f" · {report.title} (", (report.assignment, "cyan"),
                       f") · {notebook}"), width, 4)
    for c in report.cells:
        mark = Text("ok", style="green") if c.passed else Text("--", style="red")
        _say(Text.assemble("  ", mark, " ", (c.grade_id, "bold"), f" {c.points:g}/{c.max_points:g}  ",
                           (c.what, "dim")), width, 4)
        _say(feedback_block(c.feedback, FEEDBACK_INDENT), width)
    for err in report.errors:
        if not err.stubbed:
            _say(f"  code cell {err.cell} ({err.grade_id or 'no grade_id'}) raised {err.error}", width, 4)
    for note in report.notes:
        _say(f"  note: {note}", width, 6)
    style = "green" if report.score == report.max_score else ("red" if report.score == 0 else "yellow")
    console.print(f"[bold {style}]score {report.score:g}/{report.max_score:g}[/]  "
                  f"[dim]({report.elapsed_s:.1f} s)[/]")


def _grade_folder(folder: str, csv_path: str, limits: Any, jobs: int | None = None,
                  feedback: str | None = None, key: Any = None) -> None:
    from emqlab.explore.pool import default_jobs
    from emqlab.teaching.classroom import exit_code, feedback_beside, grade_folder, write_csv

    def progress(row: Any) -> None:
        score = f"{row.score:g}/{row.max_score:g}" if row.status == "graded" else row.status
        err_console.print(f"  {row.student:<16} {row.notebook:<44} {score}", markup=False, highlight=False)

    if feedback is None and csv_path != "-":
        feedback = str(feedback_beside(csv_path))
    rows = grade_folder(folder, limits=limits, progress=progress, jobs=jobs or default_jobs(), feedback=feedback,
                        key=key)
    if not rows:
        err_console.print(f"[bold red]error:[/] no notebooks (*.ipynb) under {folder}")
    elif feedback is not None:
        n = len({r.student for r in rows})
        err_console.print(f"  feedback: {n} file{'' if n == 1 else 's'} in {feedback}/ (one per student)",
                          markup=False, highlight=False)
    with click.open_file(csv_path, "w") as f:
        write_csv(rows, f)
    sys.exit(exit_code(rows))


@click.command()
@click.argument("level", required=False)
@click.option("--list", "list_levels", is_flag=True, help="List the levels and exit.")
@click.option("--plain", is_flag=True,
              help="Plain lines, one block per move, even in a terminal (what a pipe or a file gets).")
def play(level: str | None, list_levels: bool, plain: bool = False) -> None:
    """Play a level: you are the scheduler, the goal is a race.

    Each level is a scenario, a mode and a goal ("make job 1 land in two places"). Type the number (or id) of
    an actor to let it take one step (1*9 or W1*9: nine steps; several keys on a line run in turn); x shows
    the commands the last whole-script step ran (x7: step 7's), f finishes the run in order, u undoes your
    last step, r restarts, s lets the explorer try every interleaving, h gives a hint, q quits. A win prints
    why (the run's own because-sentence) and the schedule string to replay it. Levels 6 and 9 cannot be won
    by stepping: no order reaches their goal, and s shows it.

    In a terminal the game is one screen, redrawn after every move at the terminal's size (80×24 and up):
    the goal, each actor's Lua lines around its current one, the board with every job's counts and the
    queue's counters, the last reply. When its output is not a terminal (a pipe, a file) it prints plain
    lines instead, as --plain does.

    \b
    Exit status: 0 the level was won, 1 it was not (quit), 2 no such level.

    \b
    Examples:
      emqlab play --list
      emqlab play two-places
      emqlab play 9
      printf '1*9\\n2\\nf\\n' | emqlab play 1
    """
    from emqlab.teaching.levels import LevelError, load_level, shipped_levels
    from emqlab.teaching.levels import play as play_level

    if list_levels or level is None:
        for lv in shipped_levels():
            console.print(f"  {lv.number:>2}  {lv.name:<20} {lv.tagline}", markup=False, highlight=False)
        if level is None and not list_levels:
            console.print("play one: emqlab play NAME (or its number)", markup=False, highlight=False)
        return
    try:
        chosen = load_level(level)
    except LevelError as e:
        _fail(str(e))
        return

    if not plain and sys.stdin.isatty() and sys.stdout.isatty() and os.environ.get("TERM", "") != "dumb":
        from emqlab.teaching.screen import play_screen

        color = "NO_COLOR" not in os.environ  # (no-color.org: any value turns the colours off)
        sys.exit(ExitCode.HOLDS if play_screen(chosen, input, sys.stdout, color=color) else ExitCode.FAILS)

    def read(prompt: str) -> str:
        # (no prompt for keys from a pipe: it would open the line the game's answer is printed on)
        return input(prompt if sys.stdin.isatty() else "")

    def write(text: str) -> None:
        click.echo(text)

    import shutil

    from emqlab.teaching.levels import GAME_WIDTH

    # the terminal's width, at most the game's 80 columns (a narrower one is not narrowed below 40)
    width = max(40, min(GAME_WIDTH, shutil.get_terminal_size((GAME_WIDTH, 24)).columns))
    sys.exit(ExitCode.HOLDS if play_level(chosen, read, write, width) else ExitCode.FAILS)


@click.command()
@click.argument("source", type=click.Path(exists=True))
@click.argument("out", type=click.Path())
@click.option("--otter", is_flag=True,
              help="write otter-grader's layout instead: OUT/<notebook>.ipynb with grader.check cells and "
                   "OUT/tests/<grade_id>.py (SOURCE: an assignment notebook)")
def student(source: str, out: str, otter: bool) -> None:
    """Make the student version of an assignment notebook (or of every notebook in a directory).

    Does what `nbgrader generate_assignment` does to a source notebook: each `### BEGIN SOLUTION` …
    `### END SOLUTION` region becomes `# YOUR CODE HERE` + `raise NotImplementedError()`, hidden tests
    (`### BEGIN HIDDEN TESTS` … `### END HIDDEN TESTS`) are removed, outputs are cleared, and graded and
    read-only cells are made undeletable. OUT is a notebook path, or a directory when SOURCE is one.

    With --otter, the assignment is exported for otter-grader: each nbgrader test cell becomes a
    `grader.check("<grade_id>")` cell and each graded cell an OK-format test in OUT/tests/ whose doctest
    runs emqlab's own grader (docs/instructors.md).

    \b
    Examples:
      emqlab student notebooks/assignments/a1-double-placement.ipynb release/
      emqlab student notebooks/assignments release/
      emqlab student --otter notebooks/assignments/a1-double-placement.ipynb otter/a1/
    """
    from emqlab.teaching.grading import make_student_versions

    with _errors():
        if otter:
            from pathlib import Path

            from emqlab.teaching.grading import assignment_of, read_notebook
            from emqlab.teaching.otter import export

            aid = assignment_of(read_notebook(source))
            if aid is None:
                raise click.UsageError(f"{source}: not an emqlab assignment notebook (no metadata.emqlab.assignment)")
            written = export(aid, out, Path(source).parent)
        else:
            written = make_student_versions(source, out)
    for p in written:
        console.print(f"wrote {p}", highlight=False)


@click.command()
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--notebooks", type=click.Path(exists=True, file_okay=False), default=None,
              help="The notebooks folder of an emqlab checkout (default: the checkout emqlab runs from).")
def workshop(out: str, notebooks: str | None) -> None:
    """Write a workshop folder OUT: students/ (the lesson notebooks and the assignments without their
    solutions), instructor/ (the assignments with solutions and an answer key for the levels, built from the
    engine's own runs), agenda.md (90 minutes and half a day), handout.md and handout.pdf (one page:
    schedule strings, the board, the anomalies, the 14 keys) and slides.pdf (with the notebooks' figures).
    The PDFs are drawn with matplotlib: no browser or LaTeX needed.

    \b
    Examples:
      emqlab workshop ../workshop-2026-12
      emqlab workshop kit/ --notebooks ~/src/emqlab/notebooks
    """
    from emqlab.teaching.workshop import write_workshop
    from emqlab.ui.kit import write_printables

    with _errors():
        written = write_workshop(out, notebooks, printables=write_printables)
    for path in written:
        console.print(str(path), markup=False, highlight=False)
    _say(f"{len(written)} files in {out}: hand out {out}/students only", _columns(False), 4)
