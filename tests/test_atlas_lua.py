"""The race atlas's Lua-script queues: bee-queue (its npm release's scripts, run unmodified), asynq,
Laravel with Horizon and Sidekiq (their scripts modelled in our own words under ``lua/atlas/``).

* Every such scenario names its project, its public sources (``owner/repo#N (gist)``), a lesson of two or
  three sentences, and both variants side by side: ``split`` (the code as reported) and ``atomic`` (the
  fix), each with an ``expect:``; the file says where its scripts come from.
* bee-queue's scenarios live here (``tests/atlas/``), not in the shipped library: their scripts are
  fetched from the npm registry at test time (``conftest.bee_queue_release``), which a shipped scenario
  could not do offline. They are explored in both modes against their ``expect:`` on fakeredis, and on
  the live server with the same claims; the scripts a run sends are the release's bytes (SHA1 against the
  tarball the registry vouches for). The shipped ones are explored by ``tests/test_golden.py`` and, live,
  by ``tests/test_scenarios.py``.

Also here: the file format these scenarios need (``job_key``, ``seed:``, set places, JSON-payload places),
its refusals and what the checks make of it. Cost: every exploration here is a few runs; the file takes
about 6 s on fakeredis and 5 s live.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from pathlib import Path

import pytest

from emqlab.backend.connect import connect
from emqlab.engine.scenario import load, shipped_names, shipped_path
from emqlab.explore import Report, explore

from .atlas import beequeue_client as bq
from .conftest import bee_queue_release, live_conn

ATLAS = Path(__file__).parent / "atlas"
BEE_QUEUE = sorted(ATLAS.glob("bee-queue-*.yaml"))
MODELLED_PROJECTS = ("asynq", "laravel", "horizon", "sidekiq")
SHIPPED = [n for n in shipped_names() if load(n).project in MODELLED_PROJECTS]
ALL = [str(p) for p in BEE_QUEUE] + SHIPPED
_SOURCE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#\d+ \(.{10,}\)$")


def _text(name: str) -> str:
    path = Path(name) if name.endswith(".yaml") else shipped_path(name)
    assert path is not None
    return Path(path).read_text("utf-8")


def test_the_atlas_has_its_lua_projects() -> None:
    """At least two reports per project: bee-queue (npm), asynq, Laravel's queue with Horizon (Sidekiq's
    one is a bonus)."""
    projects = [load(n).project for n in ALL]
    assert projects.count("bee-queue") >= 2 and projects.count("asynq") >= 2
    assert projects.count("laravel") + projects.count("horizon") >= 2


@pytest.mark.parametrize("name", ALL, ids=[Path(n).stem for n in ALL])
def test_every_atlas_scenario_has_project_source_lesson_and_both_variants(name: str) -> None:
    sc = load(name)
    assert sc.project in ("bee-queue", *MODELLED_PROJECTS)
    assert sc.source and all(_SOURCE.match(s) for s in sc.source), sc.source
    sentences = re.findall(r"[a-z`)\]\d][.!?](?:\s|$)", sc.lesson)
    assert 2 <= len(sentences) <= 3, sc.lesson
    assert set(sc.modes) == {"split", "atomic"} == set(sc.expect)
    assert sc.expect["split"].anomalies and not sc.expect["atomic"].anomalies  # the gap, and the fix
    head = re.sub(r"\s*\n#\s*", " ", _text(name).split("\nname:")[0])  # (the file's opening comment, as one line)
    if sc.project == "bee-queue":
        assert "npm release, unmodified" in head
    else:
        assert "modelled in emqlab's own words" in head and re.search(r"not\s+(\S+ )?\S+'s code", head)


# -- bee-queue: its npm release's own scripts ----------------------------------------------------------------


def _explored(path: Path, mode: str, conn: object = None) -> Report:
    bee_queue_release()
    return explore(load(path), mode, conn=conn if conn is not None else connect())


def _check(rep: Report, path: Path, mode: str) -> None:
    expected = load(path).expect[mode]
    assert rep.complete and rep.anomaly_kinds == sorted(expected.anomalies), (rep.anomaly_kinds, path.name, mode)
    for actor, codes in expected.codes.items():
        seen = {o.code for o in rep.codes.get(actor, {}) if o.code is not None}
        assert set(codes) <= seen, (actor, codes, seen)
    for kind, h in rep.witnesses.items():
        assert kind in h.kinds


BQ_CASES = [(p, m) for p in BEE_QUEUE for m in ("split", "atomic")]


@pytest.mark.parametrize(("path", "mode"), BQ_CASES, ids=[f"{p.stem}-{m}" for p, m in BQ_CASES])
def test_bee_queue_scenarios_find_what_they_expect(path: Path, mode: str) -> None:
    _check(_explored(path, mode), path, mode)


@pytest.mark.live
@pytest.mark.parametrize(("path", "mode"), BQ_CASES, ids=[f"{p.stem}-{m}" for p, m in BQ_CASES])
def test_bee_queue_scenarios_claim_the_same_on_a_live_server(path: Path, mode: str) -> None:
    live = live_conn()
    real, fake = _explored(path, mode, live), _explored(path, mode)
    assert real.backend != fake.backend
    assert real.claims() == fake.claims()
    _check(real, path, mode)


def test_bee_queue_scripts_sent_are_the_npm_release_bytes() -> None:
    """The files the actors read are the tarball's (whose SHA1 is the registry's), and every script a run
    sends is one of them, by the SHA1 the history shows."""
    folder = bee_queue_release()
    tgz = folder.parents[2] / "release.tgz"
    assert hashlib.sha1(tgz.read_bytes()).hexdigest() == bq.TARBALL_SHA1
    with tarfile.open(tgz) as t:
        released = {Path(m.name).stem: t.extractfile(m).read()  # type: ignore[union-attr]
                    for m in t.getmembers() if m.name.startswith("package/lib/lua/") and m.name.endswith(".lua")}
    assert {"checkStalledJobs", "removeJob"} <= set(released)
    for name, body in released.items():
        assert bq.script(name) == body
    prefixes = {hashlib.sha1(b).hexdigest()[:12] for b in released.values()}
    sent = set()
    for path in BEE_QUEUE:  # (the split witnesses: each shows the bee-queue script its run sent)
        for h in _explored(path, "split").witnesses.values():
            for s in h.steps:
                m = re.match(r"<script ([0-9a-f]{12})…>", s.args[0]) if s.op == "EVAL" and s.args else None
                if m and s.actor in ("S1", "C1"):
                    sent.add(m[1])
    assert sent and sent <= prefixes, (sent, prefixes)


# -- the file format for another queue's layout (job_key, seed, set and JSON places) ----------------------------


def _scenario(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nlesson: x. y.\nsource: [a/b#1]\njobs: {\"1\": {name: n}}\n" + body)
    return path


@pytest.mark.parametrize(("body", "says"), [
    ("job_key: \"t:1\"\nactors: []\n", "put {job} where its id goes"),
    ("job_key: {key: \"bq:jobs\"}\nactors: []\n", "{key, field}"),
    ("seed: [[DEL, \"x\", \"1\"]]\nactors: []\n", "seed: writes with HSET"),
    ("seed: [[SADD, \"x\"]]\nactors: []\n", "[COMMAND, key, argument"),
    ("places: [{key: \"q:list\", json_id: \"a b\"}]\nactors: []\n", "a JSON field name"),
    ("places: [{key: \"q:list\", type: hash}]\nactors: []\n", "place type"),
])
def test_the_loader_refuses_a_bad_layout_field(tmp_path: Path, body: str, says: str) -> None:
    from emqlab.engine.scenario import ScenarioError

    with pytest.raises(ScenarioError, match=re.escape(says)):
        load(_scenario(tmp_path, body))


def _final(tmp_path: Path, body: str) -> dict[str, object]:
    from emqlab.explore.checked import Runner

    with Runner(load(_scenario(tmp_path, body)), "split", connect()) as r:
        h = r.run()
    return {"placements": h.final.placements, "jobs": h.final.jobs,
            "kinds": sorted({a["kind"] for a in h.anomalies})}


def test_a_set_place_and_a_json_place_hold_the_job_they_name(tmp_path: Path) -> None:
    """A set's member and a JSON payload's ``id`` are placements of that job: in two of them it is
    double-placed; a member that is no JSON object stands for itself."""
    got = _final(tmp_path, "places:\n  - {key: \"q:done\", type: set, jobs: [\"1\"]}\n"
                           "  - {key: \"q:list\", json_id: id, jobs: [\"1\"]}\n"
                           "seed: [[RPUSH, \"q:list\", \"2\"]]\nactors: []\n")
    assert got["placements"] == {"1": ["q:done", "q:list"]}
    assert "double-placement" in got["kinds"]  # type: ignore[operator]


def test_job_key_is_where_the_checks_look_for_a_jobs_data(tmp_path: Path) -> None:
    """With ``job_key`` the job's data is that key (no BullMQ hash is written): placed without it, the job is
    a phantom; with ``{key, field}`` it is that field of one hash."""
    got = _final(tmp_path, "job_key: \"t:{job}\"\nplaces: [{key: \"q:list\", jobs: [\"1\"]}]\nactors: []\n")
    assert got["jobs"]["1"]["exists"] is True and got["kinds"] == []  # type: ignore[index]
    got = _final(tmp_path, "job_key: {key: \"q:jobs\", field: \"{job}\"}\n"
                           "places: [{key: \"q:list\", jobs: [\"1\"]}]\nactors: []\n")
    assert got["jobs"]["1"]["exists"] is False and got["kinds"] == ["phantom-job"]  # type: ignore[index]
    got = _final(tmp_path, "job_key: {key: \"q:jobs\", field: \"{job}\"}\nseed: [[HSET, \"q:jobs\", \"1\", \"{}\"]]\n"
                           "places: [{key: \"q:list\", jobs: [\"1\"]}]\nactors: []\n")
    assert got["jobs"]["1"]["exists"] is True and got["kinds"] == []  # type: ignore[index]
