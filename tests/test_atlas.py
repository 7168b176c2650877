"""The race atlas's scenarios of other queue projects (``project:`` other than bullmq): each has its
source, lesson and both variants, says whether it runs the project's released code or models it, and the
real-library actors really run the installed, pinned library."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from emqlab.backend.connect import connect
from emqlab.engine.atlas import PINNED, MissingLibrary, require
from emqlab.engine.scenario import load, shipped_names
from emqlab.explore.checked import Runner

SCENARIOS = Path(__file__).resolve().parents[1] / "emqlab" / "scenarios"
#: the Python queue projects' scenarios (other projects' scenarios have their own tests)
PYTHON_PROJECTS = ("rq", "arq", "saq", "celery", "kombu")
ATLAS = [n for n in shipped_names() if load(n).project in PYTHON_PROJECTS]


def test_the_atlas_has_python_queue_projects() -> None:
    projects = {load(n).project for n in ATLAS}
    assert {"rq", "arq", "saq"} <= projects
    for p in ("rq", "arq", "saq"):
        assert sum(load(n).project == p for n in ATLAS) >= 2, p


@pytest.mark.parametrize("name", ATLAS)
def test_an_atlas_scenario_names_its_project_source_and_both_variants(name: str) -> None:
    sc = load(name)
    assert name.startswith(f"{sc.project}-"), "an atlas file is named <project>-<short-name>"
    assert sc.source and all("#" in s for s in sc.source)
    assert sc.lesson
    assert {"split", "atomic"} <= set(sc.modes), "the unsafe (split) and the fixed (atomic) variant"
    assert sc.expect["split"].anomalies, "the unsafe variant shows the report's outcome"
    assert not sc.expect["atomic"].anomalies, "the fixed variant holds"
    text = (SCENARIOS / f"{name}.yaml").read_text()
    real, modelled = "# real code:" in text, "# modelled:" in text
    assert real != modelled, "the file says whether it runs the project's released code or models it"
    actors = [a.python for a in sc.actors if a.python]
    assert actors
    if real:
        assert any(".atlas.rqlib:" in str(a) for a in actors)


def test_the_pinned_library_is_the_installed_one() -> None:
    rq = require("rq")
    assert importlib.metadata.version("rq") == PINNED["rq"] == rq.__version__
    assert "site-packages" in str(Path(rq.__file__)), "RQ comes from its released package, not this repository"


def test_rq_actors_run_rq_s_own_methods() -> None:
    """A split run of rq-cleanup-after-success and rq-two-schedulers calls RQ's own methods (wrapped here
    only to count the calls), and their writes land under the run's base."""
    from rq.registry import StartedJobRegistry
    from rq.scheduler import RQScheduler
    from rq.worker import Worker

    spies = [mock.patch.object(cls, meth, autospec=True, side_effect=getattr(cls, meth))
             for cls, meth in ((Worker, "handle_job_success"), (StartedJobRegistry, "cleanup"),
                               (RQScheduler, "enqueue_scheduled_jobs"))]
    with spies[0] as success, spies[1] as cleanup, spies[2] as schedule:
        with Runner(load("rq-cleanup-after-success"), "split", connect()) as r:
            h = r.run()
        assert success.call_count == 1 and cleanup.call_count == 1
        assert h.final.placements["1"] == ["rq:finished:default"]
        with Runner(load("rq-two-schedulers"), "split", connect()) as r:
            h = r.run()
        assert schedule.call_count == 2
        assert h.final.placements["1"] == ["rq:queue:default"]
    assert StartedJobRegistry.key_template == "rq:wip:{0}"  # RQ's own, back after the runs


def test_a_missing_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rq", None)
    with pytest.raises(MissingLibrary, match=r'pip install "emqlab\[atlas\]"'):
        require("rq")


def test_emqlab_imports_without_the_atlas_libraries() -> None:
    code = ("import sys; sys.modules['rq'] = None\n"
            "import emqlab.engine.atlas.rqlib, emqlab.engine.atlas.arqmodel, emqlab.engine.atlas.saqmodel\n"
            "from emqlab.engine.scenario import load; load('rq-two-schedulers'); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_a_run_without_rq_stops_with_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """An RQ actor run where RQ is not installed stops the run with one error naming the extra."""
    from emqlab.engine.pyactors import ActorError

    monkeypatch.setitem(sys.modules, "rq", None)
    with pytest.raises(ActorError, match=r'W1 raised MissingLibrary: .*pip install "emqlab\[atlas\]"'):
        with Runner(load("rq-cleanup-after-success"), "split", connect()) as r:
            r.run()


def test_rq_s_own_key_prefixes_come_back_after_a_run() -> None:
    """RQ's classes name their keys; the rq actors point them at the run's keys while they run, and give RQ
    its own values back once the last of them ends — also when the run is closed half-way — so that RQ used
    later in the same process does not write under a finished run's keys."""
    import rq.job
    import rq.queue
    import rq.registry

    def prefixes() -> tuple[object, ...]:
        return (rq.job.Job.redis_job_namespace_prefix, rq.queue.Queue.redis_queue_namespace_prefix,
                rq.registry.StartedJobRegistry.key_template, "key_template" in vars(rq.registry.BaseRegistry),
                rq.registry.FailedJobRegistry.key_template)

    own = prefixes()
    sc = load("rq-cleanup-after-success")
    with Runner(sc, "split") as r:
        r.step(r.enabled[-1])
        assert prefixes()[0] == r.keys.base  # (a job's hash is <base><id>, the hash emqlab's checks read)
    assert prefixes() == own
    with Runner(sc, "split") as r:
        r.run()
    assert prefixes() == own
