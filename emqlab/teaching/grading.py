"""Kept for the documented path ``emqlab.grading`` (``from emqlab.grading import check`` in the assignments'
hidden tests, ``try_finish`` in assignment 2, the names of ``docs/``): every public name of the grader as it
was one module. The code is in :mod:`emqlab.teaching.notebooks` (notebook files, nbgrader markers, the student
version), :mod:`emqlab.teaching.run` (running a notebook), :mod:`emqlab.teaching.grade` (grading one) and
:mod:`emqlab.teaching.assignments` (each assignment and its graders).
"""

from __future__ import annotations

from emqlab.teaching.assignments import ASSIGNMENTS, PROBES, probe_arguments
from emqlab.teaching.assignments.a1 import (
    A1_CASES,
    A1_COUNT_PROBES,
    A1_SCENARIO,
    A1_SCHEDULE_CASES,
    A1Case,
    grade_a1_atomic,
    grade_a1_gap,
    grade_a1_schedule,
)
from emqlab.teaching.assignments.a2 import (
    A2_KEYS_DOC,
    FORBIDDEN,
    FinishExploration,
    explore_finish,
    grade_a2_lease,
    grade_a2_sequential,
    grade_a2_sweep,
    grade_a2_two_workers,
    try_finish,
)
from emqlab.teaching.assignments.a3 import (
    A3_INTERVAL_MS,
    A3_JOBS,
    A3_RTT_MS,
    A3_RUN,
    A3_SEED,
    A3_VARIANTS,
    grade_a3_atomic,
    grade_a3_measured,
    grade_a3_model,
    grade_a3_p_marked,
)
from emqlab.teaching.assignments.base import (
    FEEDBACK_INDENT,
    Assignment,
    GradedCell,
    Verdict,
    feedback_block,
    feedback_width,
)
from emqlab.teaching.grade import (
    EXIT_BELOW_FULL,
    EXIT_CANNOT_GRADE,
    EXIT_FULL_MARKS,
    CellGrade,
    GradeReport,
    check,
    grade_cells,
    grade_notebook,
    key_answers,
    run_grader,
)
from emqlab.teaching.notebooks import (
    BEGIN_HIDDEN,
    BEGIN_SOLUTION,
    CODE_STUB,
    END_HIDDEN,
    END_SOLUTION,
    MAX_JSON_DEPTH,
    MAX_NOTEBOOK_BYTES,
    TEXT_STUB,
    GradingError,
    assignment_of,
    grade_id,
    graded_cells,
    is_grade,
    is_locked,
    is_solution,
    make_student_versions,
    read_notebook,
    student_version,
    validate_notebook,
    write_notebook,
)
from emqlab.teaching.run import CELL_TIMEOUT_S, CellError, CellTimeout, NotebookRun, run_notebook

__all__ = [
    "A1_CASES", "A1_COUNT_PROBES", "A1_SCENARIO", "A1_SCHEDULE_CASES", "A1Case", "A2_KEYS_DOC", "A3_INTERVAL_MS",
    "A3_JOBS", "A3_RTT_MS", "A3_RUN", "A3_SEED", "A3_VARIANTS", "ASSIGNMENTS", "Assignment", "BEGIN_HIDDEN",
    "BEGIN_SOLUTION", "CELL_TIMEOUT_S", "CODE_STUB", "CellError", "CellGrade", "CellTimeout", "END_HIDDEN",
    "END_SOLUTION", "EXIT_BELOW_FULL", "EXIT_CANNOT_GRADE", "EXIT_FULL_MARKS", "FEEDBACK_INDENT", "FORBIDDEN",
    "FinishExploration", "GradeReport", "GradedCell", "GradingError", "MAX_JSON_DEPTH", "MAX_NOTEBOOK_BYTES",
    "NotebookRun", "PROBES", "TEXT_STUB", "Verdict", "assignment_of", "check", "explore_finish", "feedback_block",
    "feedback_width", "grade_a1_atomic", "grade_a1_gap", "grade_a1_schedule", "grade_a2_lease",
    "grade_a2_sequential", "grade_a2_sweep", "grade_a2_two_workers", "grade_a3_atomic", "grade_a3_measured",
    "grade_a3_model", "grade_a3_p_marked", "grade_cells", "grade_id", "grade_notebook", "graded_cells",
    "is_grade", "is_locked", "is_solution", "key_answers", "make_student_versions", "probe_arguments",
    "read_notebook", "run_grader",
    "run_notebook", "student_version", "try_finish", "validate_notebook", "write_notebook",
]
