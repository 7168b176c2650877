"""The race atlas's scenarios of other queue projects (``project:`` other than bullmq): each has its
source, lesson and both variants, says whether it runs the project's released code or models it, and the
real-library actors really run the installed, pinned library."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from emqlab.backend.connect import connect
from emqlab.engine.atlas import PINNED, MissingLibrary, require
from emqlab.engine.scenario import load, loads, shipped_names
from emqlab.explore.checked import Runner

SCENARIOS = Path(__file__).resolve().parents[1] / "emqlab" / "scenarios"
#: the Python queue projects' scenarios (other projects' scenarios have their own tests)
PYTHON_PROJECTS = ("rq", "arq", "saq", "celery", "kombu", "dramatiq")
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
        assert any(f".atlas.{lib}:" in str(a) for a in actors for lib in ("rqlib", "dramatiqlib"))


@pytest.mark.parametrize("name", ["rq", "dramatiq"])
def test_the_pinned_library_is_the_installed_one(name: str) -> None:
    lib = require(name)
    assert importlib.metadata.version(name) == PINNED[name] == lib.__version__
    assert "site-packages" in str(Path(str(lib.__file__))), f"{name} comes from its release, not this repository"


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


@pytest.mark.parametrize("name", ["rq", "dramatiq"])
def test_a_missing_library_names_the_extra(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(MissingLibrary, match=rf'{name}=={PINNED[name]}.*pip install "emqlab\[atlas\]"'):
        require(name)


def test_emqlab_imports_without_the_atlas_libraries() -> None:
    code = ("import sys; sys.modules['rq'] = sys.modules['dramatiq'] = None\n"
            "import emqlab.engine.atlas.rqlib, emqlab.engine.atlas.arqmodel, emqlab.engine.atlas.saqmodel\n"
            "import emqlab.engine.atlas.dramatiqlib\n"
            "from emqlab.engine.scenario import load; load('rq-two-schedulers'); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_a_run_without_rq_stops_with_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """An RQ actor run where RQ is not installed stops the run with one error naming the extra."""
    from emqlab.engine.pyactors import ActorError

    monkeypatch.setitem(sys.modules, "rq", None)
    with pytest.raises(ActorError, match=r'W1 cannot run: .*pip install "emqlab\[atlas\]" \(in a checkout: pip'
                                         r' install -e "\.\[atlas\]"\)$') as e:
        with Runner(load("rq-cleanup-after-success"), "split", connect()) as r:
            r.run()
    assert "catch what your worker" not in str(e.value)  # (a missing library is nothing a worker catches)


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


# -- dramatiq: its Redis broker's dispatch.lua, as released --------------------------------------------------


def _wheel_bytes(relpath: str) -> bytes:
    """The bytes of the installed dramatiq's ``relpath``, checked against the SHA256 its wheel's RECORD lists."""
    import base64
    import hashlib

    entry = next(f for f in importlib.metadata.files("dramatiq") or [] if str(f) == relpath)
    body = entry.read_binary()
    assert entry.hash is not None and entry.hash.mode == "sha256"
    assert base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode() == entry.hash.value
    return body


def test_dramatiq_actors_send_the_released_dispatch_script_under_the_run_s_base() -> None:
    """Every script a dramatiq scenario's run sends is dispatch.lua as the wheel's RECORD vouches for it,
    with the broker's calling convention: one key, the namespace under the run's base; ARGV the command,
    the virtual timestamp, the queue, the worker, the heartbeat timeout."""
    import redis

    from emqlab.engine.atlas import dramatiqlib

    released = _wheel_bytes("dramatiq/brokers/redis/dispatch.lua")
    assert dramatiqlib.dispatch_script() == released
    sent: list[tuple[Any, ...]] = []
    real = redis.client.Pipeline.eval

    def spy(self: Any, *args: Any) -> Any:
        sent.append(args)
        return real(self, *args)

    with mock.patch.object(redis.client.Pipeline, "eval", spy):
        with Runner(load("dramatiq-heartbeat-lapse"), "split", connect()) as r:
            h = r.run(["W2", "W2", "W1"])  # (the witness: W2's maintenance requeues, W2 and W1 ack)
    assert [a["kind"] for a in h.anomalies] == ["duplicate-execution"]
    assert len(sent) == 3
    for script, numkeys, ns, command, ts, queue, worker, timeout, *_ in sent:
        assert script == released and numkeys == 1 and ns == r.keys.base + "dramatiq"
        assert command in ("fetch", "ack") and queue == "default" and worker in ("W1", "W2")
        assert isinstance(ts, int) and timeout == 60_000


def test_dramatiq_s_namespace_refuses_a_base_with_a_glob_character() -> None:
    """dispatch.lua's maintenance sends ``KEYS <ns>:__acks__.<worker>*``: a glob character in the base would
    let that pattern match keys outside the run."""
    from types import SimpleNamespace

    from emqlab.engine.atlas.dramatiqlib import namespace

    assert namespace(SimpleNamespace(keys=SimpleNamespace(base="emq:{q}:"))) == "emq:{q}:dramatiq"
    with pytest.raises(ValueError, match="glob character"):
        namespace(SimpleNamespace(keys=SimpleNamespace(base="emq:[q]:")))


def test_a_dramatiq_run_without_dramatiq_stops_with_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from emqlab.engine.pyactors import ActorError

    monkeypatch.setitem(sys.modules, "dramatiq", None)
    with pytest.raises(ActorError, match=r'cannot run: .*dramatiq==2\.2\.1.*pip install "emqlab\[atlas\]"'):
        with Runner(load("dramatiq-heartbeat-lapse"), "split", connect()) as r:
            r.run()


def test_dramatiq_seeds_are_messages_as_the_actors_write_them() -> None:
    """A seeded message's data is what :func:`dramatiqlib.message` writes (the promoter's own copy is built
    by it), and dramatiq's ``Message.decode`` reads it."""
    import dramatiq

    from emqlab.engine.atlas.dramatiqlib import message

    for name, queue, eta in (("dramatiq-heartbeat-lapse", "default", None),
                             ("dramatiq-delayed-twice", "default.DQ", 0)):
        (data,) = [c[3] for c in load(name).seed if c[0] == "HSET"]
        assert data == message("1", queue, eta=eta)
        assert dramatiq.Message.decode(data.encode()).options["redis_message_id"] == "1"


def test_a_delayed_message_promoted_twice_is_two_copies_on_the_queue() -> None:
    """dramatiq-delayed-twice's witness: W2 requeues, takes and promotes message 1; W1 promotes its own copy
    too; the queue holds 1.W2 and 1.W1, the same dramatiq message, and ``promoted-once`` names both pushes.
    W1 first: its enqueue renews its heartbeat, W2's maintenance finds no dead worker, one copy."""
    with Runner(load("dramatiq-delayed-twice"), "split", connect()) as r:
        h = r.run(["W2", "W2", "W2", "W1", "W1"])
    (broken,) = [a for a in h.anomalies if a["kind"] == "invariant:promoted-once"]
    assert "Redis ids 1.W1, 1.W2" in broken["because"] and "W2's step 2 and W1's step 4" in broken["because"]
    assert h.final.placements["1"] == []
    with Runner(load("dramatiq-delayed-twice"), "split", connect()) as r:
        h = r.run(["W1", "W1", "W2"])
    assert h.anomalies == [] and list(h.final.values["dramatiq:default.msgs"]) == ["1.W1"]


def bare_fetch(r: Any, q: Any) -> None:
    """dispatch.lua's ``fetch`` sent as a bare EVAL (not in a MULTI): a split run splits it one redis.call
    per step; ``maintenance`` as the consumer's."""
    from emqlab.engine.atlas.dramatiqlib import DEAD_MESSAGE_TTL_MS, MAX_UNPACK, dispatch_script, namespace

    r.eval(dispatch_script(), 1, namespace(q), "fetch", q.now(), "default", q.actor, 60_000, DEAD_MESSAGE_TTL_MS,
           int(bool(q.params.get("maintenance"))), MAX_UNPACK, 1)


@pytest.mark.parametrize("maintenance", [False, True])
def test_split_mode_would_break_dispatch_lua_apart_and_refuses_its_keys_call(maintenance: bool) -> None:
    """Why the dramatiq actors send each dispatch in a MULTI: a bare EVAL of dispatch.lua in a split run is run
    one redis.call per step (heartbeat, pop, ack set, data: interleavings Redis never produces, since it runs
    the script atomically), and its maintenance's KEYS is refused there (the split host runs a script on the
    run's keys only, and KEYS's pattern is not a key)."""
    from emqlab.engine.pyactors import ActorError

    text = (SCENARIOS / "dramatiq-heartbeat-lapse.yaml").read_text()
    text = text.replace('python: "emqlab.engine.atlas.dramatiqlib:consumer"', 'python: "tests.test_atlas:bare_fetch"')
    if maintenance:
        text = text.replace("heartbeat_timeout: 60000,", "maintenance: true, heartbeat_timeout: 60000,")
    sc = loads(text)
    if maintenance:
        with pytest.raises(ActorError, match=r"NOPERM emqlab runs a script on its run's keys only .*KEYS reaches"):
            with Runner(sc, "split", connect()) as r:
                r.run(choose=lambda r: r.enabled[-1])  # (W2 first, while W1's heartbeat is lapsed)
        return
    with Runner(sc, "split", connect()) as r:
        h = r.run()
    w2 = [s for s in h.steps if s.actor == "W2"]
    assert [s.op for s in w2] == ["ZADD", "LPOP"], [s.op for s in w2]  # (the queue is empty: no SADD, no HMGET)
