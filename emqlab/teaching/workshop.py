"""A workshop from the box (``emqlab workshop DIR``): the students' copies, the instructor's answer key, an
agenda and a one-page handout, written from the notebooks of an emqlab checkout and from the code itself —
the levels' solutions and their own because-sentences, the 14 keys in protocol order, the schedule
syntax — so that what the handout and the key say is what the engine does.

The assignments with their solutions are read from the checkout's ``notebooks/assignments`` and written to
``instructor/`` only: the installed package holds no answers, and ``instructor/`` is the answer key
``emqlab grade --key`` takes (:mod:`emqlab.teaching.key`; ``docs/instructors.md``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from emqlab.text import PageBlock, Span, bold, code, code_block, em, markdown, para, table, title

#: the notebooks every student opens, in order
LESSONS = ("01-read-decide-write.ipynb", "02-interleavings.ipynb", "03-round-trips.ipynb",
           "04-levels.ipynb")

AGENDA = """# Agenda

## 90 minutes

| time | what | material |
|---:|---|---|
| 0:00 | Why a finish is a read, a decision and writes | notebook 01 (run it together) |
| 0:15 | You are the scheduler | `emqlab play 1`, then levels 2–4 in pairs |
| 0:35 | Every interleaving, and why atomic has none | notebook 02 |
| 0:50 | Assignment a1: find the race | `students/a1-double-placement.ipynb` |
| 1:10 | Round trips and time | notebook 03 (the slider) |
| 1:20 | Atomic is not exactly-once | `emqlab play 5`, `emqlab play 12`; discussion |
| 1:30 | end | |

## Half a day (3 h 30 with breaks)

| time | what | material |
|---:|---|---|
| 0:00 | Why a finish is a read, a decision and writes | notebook 01 |
| 0:20 | You are the scheduler | levels 1–8 in pairs (`emqlab play`, or notebook 04) |
| 1:00 | Every interleaving, and why atomic has none | notebook 02, levels 6 and 9 (unsolvable) |
| 1:20 | break | |
| 1:35 | Assignment a1: find the race | `students/a1-double-placement.ipynb` |
| 2:05 | Assignment a2: repair a finish | `students/a2-repair-finish.ipynb` |
| 2:35 | break | |
| 2:45 | Round trips and time, assignment a3 | notebook 03, `students/a3-rate-vs-rtt.ipynb` |
| 3:15 | Atomic is not exactly-once: levels 5, 10–15 | discussion |
| 3:30 | end | |

Grade the submissions with `emqlab grade submitted/ --key instructor/ --csv grades.csv` and hand each
student their `grades-feedback/<student>.txt` (written beside the CSV: every notebook of theirs, graded).
"""


#: the level whose board the handout shows, and the steps before each of its two boards (the moment a
#: sweep would do damage, then the damage done): level 1's stored solution, stopped before and after S1
BOARD_LEVEL = 1


def example_schedule() -> str:
    """The handout's schedule string, written by the codec itself (W1 nine steps, S1 one, W1 eight)."""
    from emqlab.protocol.schedules import format_schedule

    return format_schedule(["W1"] * 9 + ["S1"] + ["W1"] * 8)


def example_boards() -> tuple[str, str, str]:
    """Level :data:`BOARD_LEVEL`'s stored solution played by the game: (the solution, the board just before
    its last step, the board just after it), as ``emqlab play`` prints them (:func:`board_text`)."""
    from emqlab.protocol.schedules import parse_schedule
    from emqlab.teaching.levels import Game, load_level

    lv = load_level(BOARD_LEVEL)
    game = Game(lv)
    try:
        moves = parse_schedule(lv.solution, game.actors)
        for actor in moves[:-1]:
            game.step(actor)
        before = game.board()
        game.step(moves[-1])
        return lv.solution, before, game.board()
    finally:
        game.close()


def handout() -> tuple[PageBlock, ...]:
    """The one-page handout as blocks (``handout.md`` is :func:`handout_markdown`; ``handout.pdf`` is drawn
    from the same blocks by :func:`emqlab.ui.kit.write_handout_pdf`): the schedule string written by the
    codec, two boards of a real run, the anomaly kinds, moveToFinished's 14 keys in protocol order
    (:meth:`~emqlab.protocol.keys.QueueKeys.move_to_finished_keys`), the commands."""
    from emqlab.analysis.anomalies import KINDS
    from emqlab.protocol.keys import QueueKeys
    from emqlab.teaching.level_view import BOARD

    k = QueueKeys("q")
    keys = k.move_to_finished_keys("J", "completed")
    schedule = example_schedule()
    solution, before, after = example_boards()

    def listed(names: Sequence[str]) -> list[str | Span]:
        out: list[str | Span] = []
        for i, name in enumerate(names):
            out += [", "] if i else []
            out.append(code(name))
        return out

    return (
        title("emqlab — one page"),
        para(bold("The point."), " Finishing a job is a read (is the lock still mine?), a decision and several"
             " writes. Sent as separate commands (", em("split"), "), another client — the recovery sweep — can"
             " run between them; as one ", code("EVALSHA"), " of ", code("moveToFinished"), " (", em("atomic"),
             ") nothing can."),
        para(bold("A schedule string"), " says who takes each step: ", code(schedule), " is W1's first nine"
             " steps, then S1's one, then W1's next eight; when the string ends, each actor left runs to its"
             " end, in scenario order. ", code(f"emqlab replay '{schedule}' --split -s NAME"), " shows that run"
             " step by step."),
        para(bold("The board"), " (", code("emqlab play"), "): the lists ", *listed(BOARD), ", the locks (",
             code("job→token"), ") and, below, each job's counts; ", code("!"), " a warning (such as: a sweep"
             " now would do damage), ", code("!!"), " the damage is done. Level ", str(BOARD_LEVEL), ", ",
             code(solution), ", before and after its last step:"),
        code_block(before.splitlines()),
        code_block(after.splitlines()),
        para(bold("The anomalies"), " the checks name: ", *listed(KINDS), "; a scenario's own rules are ",
             code("invariant:<name>"), "."),
        para(bold("moveToFinished's 14 keys"), ", in protocol order (", code("KEYS[1..14]"), "; all share the ",
             code("{queue}"), " hash tag):"),
        table(("#", "key"), [(str(i), code(k.relative(key))) for i, key in enumerate(keys, start=1)],
              right=(True, False)),
        para("(", code("J"), " is the job's own hash; keys 11 and 13 follow the target: ", code("completed"),
             " and ", code("metrics:completed"), " as shown, or ", code("failed"), " and ", code("metrics:failed"),
             ".)"),
        para(bold("Commands"), " (", code("emqlab COMMAND --help"), " for each): ", code("emqlab simulate --split"),
             " / ", code("--atomic"), " (every interleaving, the anomalies, a witness), ",
             code("emqlab replay 'v1:…'"), " (one run, step by step), ", code("emqlab play N"), " (you are the"
             " scheduler), ", code("emqlab scenarios"), " (the races from public bug reports)."),
    )


def handout_markdown() -> str:
    """``handout.md``: :func:`handout` written as Markdown."""
    return markdown(handout())


def _answer_key() -> str:
    from emqlab.protocol.schedules import parse_schedule
    from emqlab.teaching.levels import Game, shipped_levels

    out = ["# Answer key (instructors only)", "",
           "The levels: a winning schedule, the hint's schedule, and what the engine says of the winning run",
           "(its own because-sentence). The assignments' solutions are the notebooks in this folder.", ""]
    for lv in shipped_levels():
        out.append(f"## Level {lv.number} · {lv.title} ({lv.name})")
        out.append("")
        out.append(f"*{lv.tagline}* — goal: {lv.goal.text} ({lv.scenario}, {lv.mode})")
        out.append("")
        if not lv.solvable:
            out += ["No schedule wins: `s` in the game lets the explorer try every interleaving.", "",
                    f"Lesson: {lv.lesson}", ""]
            continue
        game = Game(lv)
        try:
            for actor in parse_schedule(lv.solution, game.actors):
                game.step(actor)
            game.finish()
            why = lv.goal.reasons(game.history())
            schedule = game.schedule
        finally:
            game.close()
        out += [f"- solution: `{lv.solution}` (the whole run: `{schedule}`)",
                f"- the hint's schedule: `{lv.hint_schedule}`",
                f"- why: {why[0] if why else '(no because-sentence)'}",
                f"- lesson: {lv.lesson}", ""]
    return "\n".join(out)


def default_notebooks() -> Path | None:
    """The ``notebooks/`` folder of the emqlab checkout this package runs from, if there is one."""
    here = Path(__file__).resolve().parents[2] / "notebooks"
    return here if (here / "assignments").is_dir() else None


def write_workshop(out: str | Path, notebooks: str | Path | None = None,
                   printables: Callable[[Path], list[Path]] | None = None) -> list[Path]:
    """Write a workshop folder at ``out`` (which must not exist or be empty) from ``notebooks`` (a
    checkout's ``notebooks/``; default :func:`default_notebooks`): ``students/`` (the lesson notebooks and
    the assignments' student versions), ``instructor/`` (the assignments with their solutions and
    ``answer-key.md``), ``agenda.md``, ``handout.md`` and ``README.md``; then ``printables(out)``, when
    given, writes the PDFs (``emqlab workshop`` passes :func:`emqlab.ui.kit.write_printables`, a layer
    above this one) and the README lists what it wrote. Returns the files written. Raises ``ValueError``
    when ``out`` holds files already or the notebooks cannot be found."""
    from emqlab.teaching.notebooks import read_notebook, student_version, write_notebook

    out = Path(out)
    src = Path(notebooks) if notebooks is not None else default_notebooks()
    if src is None or not (src / "assignments").is_dir():
        raise ValueError("no notebooks/ with assignments/ found: run from an emqlab checkout, or pass"
                         " --notebooks PATH (the checkout's notebooks folder)")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty: choose a new folder (nothing was written)")
    students, instructor = out / "students", out / "instructor"
    students.mkdir(parents=True)
    instructor.mkdir()
    written: list[Path] = []
    for name in LESSONS:
        if (src / name).is_file():
            written.append(Path(shutil.copyfile(src / name, students / name)))
    for nb_path in sorted((src / "assignments").glob("*.ipynb")):
        write_notebook(student_version(read_notebook(nb_path)), students / nb_path.name)
        written.append(students / nb_path.name)
        written.append(Path(shutil.copyfile(nb_path, instructor / nb_path.name)))
    for path, text in ((instructor / "answer-key.md", _answer_key()), (out / "agenda.md", AGENDA),
                       (out / "handout.md", handout_markdown())):
        path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        written.append(path)
    pdfs = printables(out) if printables is not None else []
    (out / "README.md").write_text(_readme([p.name for p in pdfs]), encoding="utf-8")
    return [*written, *pdfs, out / "README.md"]


#: what the README says of each printable ``printables`` may write
_PRINTABLES = {"handout.pdf": "`handout.md` as one A4 page, to print or project",
               "slides.pdf": "16:9 slides with the notebooks' figures: the race's history and timeline, "
                             "the interleaving counts, round trips against the RTT, the boards, the levels, "
                             "the commands"}


def _readme(pdfs: list[str]) -> str:
    extra = "".join(f"- `{name}`: {_PRINTABLES.get(name, 'a printable')}.\n" for name in pdfs)
    return f"""# A workshop with emqlab

- `students/`: what each student gets (the lesson notebooks and the assignments without their
  solutions). Hand out this folder only.
- `instructor/`: the assignments with their solutions and `answer-key.md` (the levels). Keep it: it is
  the answer key `emqlab grade --key instructor/` grades against (the package itself holds no answer).
- `agenda.md`: 90 minutes, and half a day.
- `handout.md`: one page to print: schedule strings, the board, the anomalies, the 14 keys, the commands.
{extra}
Students: `pip install "emqlab[lab]"` (from the wheel you give them: `pip install "<wheel>[lab]"`; the `lab`
extra brings JupyterLab), then `jupyter lab students/` and `emqlab play 1` (`emqlab play` alone lists the levels).
Grading: `emqlab grade submitted/ --key instructor/ --csv grades.csv` (one folder per student in
`submitted/`) writes the grades and, beside them, `grades-feedback/<student>.txt`: one file per student,
to hand back.
"""


__all__ = ["AGENDA", "BOARD_LEVEL", "LESSONS", "default_notebooks", "example_boards", "example_schedule",
           "handout", "handout_markdown", "write_workshop"]
