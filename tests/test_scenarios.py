"""The scenario library is a test suite: every shipped scenario is explored exhaustively in every mode it
lists, and the anomaly kinds found must equal the file's ``expect:`` for that mode; the return codes it
names must appear among the actors' results (``Report.results``: ``finish:1:-2``, ``cancel:1:-3``).

Also here: the library's own conventions (lesson, public source, headline anomaly), a live-Redis run of a
few small scenarios that must give the very same counts as fakeredis, and the cross-slot lint: every key a
script names hashes to one Redis Cluster slot (CRC16 of the ``{hash tag}``). Finally, the docs' scenario
catalogue and CLI reference, generated from these files and commands by ``docs/hooks.py``, and a strict
``mkdocs build``.

Budget: the whole file runs in well under 90 s on fakeredis; scenarios whose raw interleaving count is
large carry ``preemptions: K`` in the file (measure with ``emqlab simulate --split --scenario NAME``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import click
import pytest

from emqlab.backend.connect import connect
from emqlab.engine.scenario import ANOMALY_KINDS, MODES, load, shipped_names
from emqlab.explore import Report, explore
from emqlab.explore.checked import Runner
from emqlab.protocol.keys import QueueKeys

from .conftest import live_conn

NAMES = shipped_names()
CASES = [(name, mode) for name in NAMES for mode in load(name).modes]

#: Scenarios explored twice (fakeredis and live, each within the scenario's own preemption bound): the first
#: five, and every scenario built from blocks or other Python actors, or with a fault, in its headline mode
#: (one home: tests/test_blocks.py has no live test of its own).
LIVE_CASES = [("stalled-finish", "split"), ("cancel-active", "split"), ("retry-requeue", "split"),
              ("mark-then-recover", "split"), ("two-workers", "atomic"),
              ("abandoned-after-success", "transaction"), ("empty-then-delete", "split"),
              ("failure-fields-orphan", "split"), ("progress-after-removal", "split"),
              ("recovery-by-identity", "split"), ("refresh-after-fail", "split"), ("renew-after-finish", "split"),
              ("retry-all-loop", "split"), ("shared-token", "split"), ("shutdown-requeue", "split"),
              ("snapshot-sweep", "split"), ("split-promoter", "split"),
              # the race atlas (other queue projects): each in its split mode, which shows the report
              ("rq-cleanup-after-success", "split"), ("rq-two-schedulers", "split"),
              ("rq-intermediate-cleanup", "split"), ("rq-dequeue-crash", "split"),
              ("arq-status-not-found", "split"), ("arq-cron-rerun", "split"), ("arq-abort-outlives-job", "split"),
              ("saq-sweep-before-process", "split"), ("saq-heartbeat-overwrites-abort", "split"),
              ("dramatiq-heartbeat-lapse", "split"), ("dramatiq-delayed-twice", "split"),
              # the atlas's modelled Lua queues (tests/test_atlas_lua.py has bee-queue's, from npm)
              ("asynq-orphan-active", "split"), ("asynq-stale-recovery", "split"), ("asynq-periodic-twice", "split"),
              ("horizon-late-record", "split"), ("horizon-late-release", "split"), ("horizon-retry-trail", "split"),
              ("laravel-migrate-twice", "split"), ("laravel-pop-lost", "split"), ("sidekiq-poller-twice", "split")]
# ... and the atlas's fixed variants: every other queue's scenario in its other modes too
LIVE_CASES += [(sc.name, m) for sc in (load(n) for n, _ in LIVE_CASES) if sc.project != "bullmq"
               for m in sc.modes if m != "split"]

#: Scenarios written before the library's "two or three sentences" convention, with their sentence count.
_LONGER_LESSONS = {"two-workers": 4}

_SOURCE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(#\d+)?\b")


def codes_seen(rep: Report, actor: str) -> set[int]:
    """The return codes of ``actor``'s finishes and cancels in any run."""
    return {o.code for o in rep.codes.get(actor, {}) if o.code is not None}


# -- every scenario, every mode ----------------------------------------------------------------------------


# the exhaustive exploration of every scenario × mode against its expect: lives in tests/test_golden.py
# (one exploration per case, also held against its recorded report)


@pytest.mark.parametrize("name", NAMES)
def test_scenario_conventions(name: str) -> None:
    """Each scenario states its lesson in two or three sentences, its public source as owner/repo#number,
    its headline anomaly (an anomaly of split mode, or none), and an expected outcome for every mode."""
    sc = load(name)
    sentences = re.findall(r"[a-z`)\]\d][.!?](?:\s|$)", sc.lesson)
    most = _LONGER_LESSONS.get(name, 3)
    assert 2 <= len(sentences) <= most, f"{name}: lesson has {len(sentences)} sentences: {sc.lesson!r}"
    assert sc.source, f"{name}: no source"
    for s in sc.source:
        assert _SOURCE.match(s), f"{name}: source {s!r} is not owner/repo#number"
    assert any("#" in s for s in sc.source), f"{name}: no issue or PR number in {sc.source}"
    assert sc.title and sc.title != sc.name
    assert set(sc.expect) == set(sc.modes), f"{name}: expect covers {sorted(sc.expect)}, modes are {sc.modes}"
    assert set(sc.modes) <= set(MODES)
    if sc.anomaly == "none":  # (a headline of none: no mode shows any anomaly)
        assert not any(e.anomalies for e in sc.expect.values()), f"{name}: anomaly none, yet {sc.expect}"
    else:
        assert sc.anomaly in ANOMALY_KINDS or sc.anomaly in {i.kind for i in sc.invariants}
        headline_mode = "split" if "split" in sc.modes else sc.modes[0]
        assert sc.anomaly in sc.expect[headline_mode].anomalies, (
            f"{name}: headline anomaly {sc.anomaly} is not expected in {headline_mode}")


def test_library_has_the_classroom_scenarios() -> None:
    """At least ten scenarios beyond the four the engine shipped with, each from a public report."""
    base = {"stalled-finish", "two-workers", "lease-lapse", "fetch-loop"}
    assert base <= set(NAMES)
    assert len(set(NAMES) - base) >= 10


def test_atomic_prevents_what_split_shows() -> None:
    """The library's thesis, checked on the expectations: wherever a scenario lists both modes and its
    anomaly is specific to a split finish, the atomic finish is expected to be free of it. (A scenario whose
    two modes show the same kinds is about what atomicity does not fix: recovery-by-identity.)"""
    for name in NAMES:
        sc = load(name)
        if not {"split", "atomic"} <= set(sc.modes) or sc.anomaly == "none":
            continue
        split, atomic = set(sc.expect["split"].anomalies), set(sc.expect["atomic"].anomalies)
        if split == atomic:
            continue
        assert atomic <= split, f"{name}: atomic shows {atomic - split} that split does not"
        assert sc.anomaly not in atomic, f"{name}: the headline {sc.anomaly} is expected in atomic mode too"


# -- the same counts on a live Redis ------------------------------------------------------------------------


def _counts(rep: Report) -> dict[str, object]:
    """The exploration's claims (exact counts, anomalies, witnesses): identical on both backends, while the
    runs it took may differ (an atomic step's footprint is observed on fakeredis, declared on a server)."""
    return rep.claims()


@pytest.mark.live
@pytest.mark.parametrize(("name", "mode"), LIVE_CASES, ids=[f"{n}-{m}" for n, m in LIVE_CASES])
def test_live_redis_gives_identical_counts(name: str, mode: str) -> None:
    live = live_conn()
    sc = load(name)
    fake = explore(sc, mode, conn=connect())
    real = explore(sc, mode, conn=live)
    assert real.backend != fake.backend
    assert _counts(real) == _counts(fake)


# -- the cross-slot lint (BR-24) ---------------------------------------------------------------------------


def crc16(data: bytes) -> int:
    """CRC16-CCITT (XMODEM), the checksum of the Redis Cluster specification ("Keys distribution model")."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def key_slot(key: str) -> int:
    """The cluster slot of ``key``: CRC16 of the first non-empty ``{…}`` section, else of the whole key,
    mod 16384 (Redis Cluster specification, "Hash tags")."""
    raw = key.encode()
    start = raw.find(b"{")
    if start != -1:
        end = raw.find(b"}", start + 1)
        if end != -1 and end != start + 1:
            raw = raw[start + 1:end]
    return crc16(raw) % 16384


def test_crc16_matches_the_cluster_spec() -> None:
    assert crc16(b"123456789") == 0x31C3  # the spec's test vector
    assert key_slot("somekey") == 11058  # CLUSTER KEYSLOT somekey (redis.io command page)
    assert key_slot("foo{hash_tag}") == 2515  # CLUSTER KEYSLOT foo{hash_tag}
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers")
    assert key_slot("foo{}{bar}") == crc16(b"foo{}{bar}") % 16384  # an empty tag: the whole key
    assert key_slot("foo{{bar}}zap") == crc16(b"{bar") % 16384  # up to the first "}"


def _script_key_lists(k: QueueKeys) -> dict[str, list[str]]:
    return {
        "moveToFinished-14 (completed)": k.move_to_finished_keys("7", "completed"),
        "moveToFinished-14 (failed)": k.move_to_finished_keys("7", "failed"),
        "moveToActive-11": k.move_to_active_keys(),
        "moveStalledJobsToWait-8": k.move_stalled_jobs_to_wait_keys(),
        "addStandardJob-9": k.add_standard_job_keys(),
        "extendLock-2": k.extend_lock_keys("7"),
    }


@pytest.mark.parametrize("queue", ["q", "orders", "q-1a2b3c4d"])
def test_every_script_key_shares_one_slot(queue: str) -> None:
    k = QueueKeys(queue)
    for script, keys in _script_key_lists(k).items():
        slots = {key_slot(x) for x in keys}
        assert len(slots) == 1, f"{script}: keys span slots {sorted(slots)}"
    # the keys a script derives at run time (job hash, lock, siblings) share the slot as well
    derived = [k.job("7"), k.lock("7"), k.job("7") + ":logs", k.job("7") + ":dependencies", k.metrics("completed")]
    assert {key_slot(x) for x in derived} == {key_slot(k.wait)}


def test_without_a_hash_tag_the_finish_would_be_crossslot() -> None:
    """What a key layout without ``{…}`` would do on Redis Cluster: the 14 keys of one finish land in many
    slots, and the cluster refuses the EVALSHA with CROSSSLOT before running any of it."""
    k = QueueKeys("q")
    untagged = [x.replace("{q}", "q") for x in k.move_to_finished_keys("7", "completed")]
    assert len({key_slot(x) for x in untagged}) > 1


@pytest.mark.parametrize("name", NAMES)
def test_every_key_a_scenario_touches_is_in_the_queue_slot(name: str) -> None:
    sc = load(name)
    mode = "split" if "split" in sc.modes else sc.modes[0]
    with Runner(sc, mode, connect()) as r:
        h = r.run()
        base = r.keys.base
        slot = key_slot(r.keys.wait)
    # step keys are shown relative to the queue's base; a key outside it would be shown whole
    keys = {k if "{" in k else base + k for s in h.steps for k in s.keys}
    assert keys
    assert {key_slot(x) for x in keys} == {slot}


# -- the catalogue in the docs is generated from these files -------------------------------------------------


def _hooks() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "docs" / "hooks.py"
    spec = importlib.util.spec_from_file_location("emqlab_docs_hooks", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_catalogue_lists_every_scenario_and_source() -> None:
    page = _hooks().scenario_catalogue()
    for name in NAMES:
        sc = load(name)
        assert f"## {name}\n" in page
        assert sc.lesson in page
        for s in sc.source:
            m = re.match(r"([\w.-]+)/([\w.-]+)#(\d+)", s)
            if m:
                assert f"https://github.com/{m[1]}/{m[2]}/issues/{m[3]}" in page


def test_docs_cli_reference_has_every_command() -> None:
    from emqlab.ui.cli import main

    page = _hooks().cli_reference()
    for name in main.list_commands(click.Context(main)):
        assert f"## emqlab {name}\n" in page
        assert f"Usage: emqlab {name}" in page


def test_the_atlas_page_has_every_other_project_s_scenario_with_a_witness_that_replays() -> None:
    """docs/atlas.md's tables (generated): one row per scenario of a project other than BullMQ, under its
    project's heading; each witness's replay line reproduces the kind it names."""
    from click.testing import CliRunner

    from emqlab.engine.scenario import shipped
    from emqlab.ui.cli import main

    hooks = _hooks()
    hooks._generated.update(hooks.atlas_files(connect()))
    page = hooks.atlas_page()
    data = json.loads(hooks._generated["assets/atlas.json"])
    atlas = [sc for sc in shipped() if sc.project != "bullmq"]
    assert atlas and {sc.project for sc in atlas} == {line[3:] for line in page.splitlines() if line.startswith("## ")}
    assert {sc.project for sc in atlas} <= set(hooks.ATLAS_CODE)  # (each project says what its scenarios run)
    for sc in atlas:
        assert page.count(f"[{sc.name}](scenarios.md#{sc.name})") == 1, sc.name
    for project in data.values():
        for name, w in project["witnesses"].items():
            expect = [x for k in w["kinds"] for x in ("--expect", k)]
            res = CliRunner().invoke(main, ["replay", w["schedule"], f"--{w['mode']}", "-s", name, *expect])
            assert res.exit_code == 0, (name, res.output[-800:])


def test_docs_site_builds_strict(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (the catalogue and the CLI reference are generated during the build)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                         cwd=root, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "site" / "scenarios" / "index.html").exists()


def test_scenarios_check_in_two_processes_prints_what_one_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """``emqlab scenarios --check --jobs 2``: each case explored whole in a worker, printed in library order:
    the same lines as one process gives (on a few of the library's scenarios: the whole check is what
    test_scenario_outcome_matches_expect does, case by case)."""
    import emqlab.scenario
    from click.testing import CliRunner

    from emqlab.ui.cli import main

    few = [load(n) for n in ("stalled-finish", "cancel-active", "lease-lapse", "empty-then-delete")]
    monkeypatch.setattr(emqlab.scenario, "shipped", lambda: few)
    out = {}
    for n in ("1", "2"):
        res = CliRunner().invoke(main, ["scenarios", "--check", "--jobs", n])
        assert res.exit_code == 0, res.output
        out[n] = res.output
    assert out["1"] == out["2"] and "MISMATCH" not in out["1"]
    cases = sum(len(s.modes) for s in few)
    assert out["1"].count("\n") == cases + 1 and "empty-then-delete" in out["1"]
    lines = out["1"].splitlines()
    assert lines[-1] == f"{cases} of {cases} scenario × mode cases as expected"
    assert len({line.index(" found ") for line in lines[:-1]}) == 1, out["1"]  # one column, the longest name's
    assert "ok       stalled-finish    split             found double-placement" in out["1"]
    assert "[" not in out["1"]  # kinds as words, not a Python list
    # a mismatch starts its name in the same column as an ok row, and the summary counts it
    import dataclasses

    wrong = dataclasses.replace(few[0], expect={m: dataclasses.replace(e, anomalies=())
                                                for m, e in few[0].expect.items()})
    monkeypatch.setattr(emqlab.scenario, "shipped", lambda: [wrong, few[1]])
    res = CliRunner().invoke(main, ["scenarios", "--check", "--jobs", "1"])
    assert res.exit_code == 1, res.output
    rows = res.output.splitlines()
    assert any(r.startswith("MISMATCH stalled-finish") for r in rows) and any(r.startswith("ok       ") for r in rows)
    assert len({r.index(" found ") for r in rows[:-1]}) == 1, res.output
    assert rows[-1].endswith(" MISMATCH") and " cases as expected, " in rows[-1]
