"""Scenarios as data: a YAML file states the initial queue state, the actors and their modes, the lesson and
its public source, and the expected outcome per finish mode.

The loader checks every field and reports the first problem as one line naming the file, the line and the
field: ``two-workers.yaml:14: actors[1].kind: unknown actor kind 'wroker' (one of: worker, sweep, lease,
producer, canceller)``. The shipped scenarios live in ``emqlab/scenarios/*.yaml``; ``emqlab scenarios``
lists them.

This module is the home of loading (:func:`load`, :func:`loads`, the shipped library); the data it builds
is :mod:`emqlab.engine.specs`, the YAML reading and the input limits :mod:`emqlab.engine.yamlnodes`, and a
``python: module:function`` reference is checked through :mod:`emqlab.engine.pyref` (the same resolver the
Python-actor driver runs), so a bad reference is reported here, with its file and line.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from emqlab.engine.context import MODES  # one home for the finish modes
from emqlab.engine.effects import ExtraPlace
from emqlab.engine.pyref import resolve
from emqlab.engine.specs import (
    ACTOR_KINDS,
    ANOMALY_KINDS,
    FAULT_KINDS,
    ON_ERROR,
    PLACEMENT_FIELDS,
    ActorSpec,
    Expectation,
    InvariantSpec,
    JobSpec,
    Scenario,
)
from emqlab.engine.yamlnodes import (
    JOB_ID,
    KEEP_JOBS_KEYS,
    MAX_ACTORS,
    MAX_ATTEMPTS,
    MAX_DATA_DEPTH,
    MAX_DATA_INT,
    MAX_FILE_BYTES,
    MAX_JOBS,
    MAX_MS,
    MAX_PREEMPTIONS,
    MAX_PRIORITY,
    MAX_REPEATS,
    MAX_SCORE,
    MAX_YAML_DEPTH,
    Node,
    Refused,
    SafeLoader,
    ScenarioError,
    read_file,
    short,
)

# -- loading -------------------------------------------------------------------------------------------

TOP_KEYS = ("name", "title", "lesson", "source", "project", "anomaly", "queue", "jobs", "state", "places", "job_key",
            "seed", "actors", "expect", "modes", "preemptions", "invariants")
INVARIANT_KEYS = ("name", "field", "agrees", "counter", "equals_count_in", "exists_while_active", "python", "reads")
#: an invariant's name: what a report shows after ``invariant:``
INVARIANT_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
#: a ``project:``: the queue project whose race the scenario replays, as its package is named
PROJECT_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,39}")
PLACE_KEYS = ("key", "type", "jobs", "index", "member", "json_id")
#: a place's key (and its index's): relative to the queue's base, letters, digits, ``_ . : -``
PLACE_KEY = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")
JOB_KEYS = ("name", "data", "attempts", "backoff", "priority", "delay", "fields")
STATE_KEYS = (*PLACEMENT_FIELDS, "locks", "meta", "metrics")
ACTOR_KEYS: dict[str, tuple[str, ...]] = {
    "worker": ("id", "kind", "holds", "jobs", "finish", "value", "mode", "fetch_next", "fetch_attempts",
               "keep_jobs", "attempts", "renewals", "on_error", "noscript", "watch", "script"),
    "sweep": ("id", "kind", "mode", "max_stalled", "runs", "script"),
    "lease": ("id", "kind", "job", "of"),
    "producer": ("id", "kind", "job"),
    "canceller": ("id", "kind", "job", "mode", "value", "script"),
    "crash": ("id", "kind", "of", "lapse", "restart"),
    "disconnect": ("id", "kind", "of", "applied"),
    "script-flush": ("id", "kind"),
    "restart": ("id", "kind"),
    "python": ("id", "kind", "python", "mode", "adds", "with"),
}


def load(source: str | Path) -> Scenario:
    """Load a scenario from a file path, or a shipped scenario by name. Raises :class:`ScenarioError`."""
    path = Path(source)
    if not path.suffix and not path.exists():
        shipped = shipped_path(str(source))
        if shipped is None:
            names = shipped_names()
            near = difflib.get_close_matches(str(source), names, n=3)
            raise ScenarioError(
                f"no scenario named {source!r}"
                + (f" (did you mean {', '.join(near)}?)" if near else "")
                + f": `emqlab scenarios` lists the {len(names)} shipped ones; or give a path to a .yaml file"
            )
        path = shipped
    text = read_file(path, str(source))
    return loads(text, str(path.name if path.parent == _shipped_dir() else path), str(path.resolve().parent))


def loads(text: str, path: str = "<scenario>", base_dir: str | None = None) -> Scenario:
    """Parse scenario YAML ``text``; ``path`` names it in error messages; a ``python: module:function``
    actor is imported with ``base_dir`` (the file's folder, when loaded from a file) first on the path."""
    if len(text) > MAX_FILE_BYTES:
        raise ScenarioError(f"{path}:1: larger than {MAX_FILE_BYTES:,} bytes (a scenario file is a few dozen lines)")
    try:
        root = yaml.compose(text, Loader=SafeLoader)
    except Refused as e:
        mark = e.problem_mark
        raise ScenarioError(f"{path}:{mark.line + 1 if mark else 1}: {e.problem}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 0
        problem = " ".join((getattr(e, "problem", None) or str(e)).split())
        opened = getattr(e, "context_mark", None)
        context = getattr(e, "context", None)
        if opened is not None and context and opened.line + 1 < line:
            # an unclosed quote or bracket: point at the line that opened it
            what = " ".join(context.split()).removeprefix("while parsing ").removeprefix("while scanning ")
            raise ScenarioError(f"{path}:{opened.line + 1}: YAML syntax: {what} opened here is not closed"
                                f" ({problem} at line {line})") from None
        raise ScenarioError(f"{path}:{line}: YAML syntax: {problem}") from None
    if root is None:
        raise ScenarioError(f"{path}:1: the file is empty")
    top = Node(root, path, "").mapping(TOP_KEYS)
    for required in ("name", "actors"):
        if required not in top:
            raise ScenarioError(f"{path}:1: {required}: missing (required)")

    jobs: dict[str, JobSpec] = {}
    if "jobs" in top:
        job_nodes = top["jobs"].mapping()
        if len(job_nodes) > MAX_JOBS:
            raise top["jobs"].fail(f"at most {MAX_JOBS} jobs, got {len(job_nodes)}")
        for jid, node in job_nodes.items():
            if not JOB_ID.fullmatch(jid):
                raise node.fail(f"job ids are 1 to 64 letters, digits, '_', '.' or '-', got {short(jid)}")
            m = node.mapping(JOB_KEYS) if not isinstance(node.node, yaml.ScalarNode) or node.node.value else {}
            job = JobSpec(id=jid)
            if "name" in m:
                job.name = m["name"].text()
            if "data" in m:
                job.data = m["data"].json_value()
            limits = {"attempts": MAX_ATTEMPTS, "backoff": MAX_MS, "priority": MAX_PRIORITY, "delay": MAX_MS}
            for k, most in limits.items():
                if k in m:
                    setattr(job, k, m[k].integer(0, most))
            if "fields" in m:
                job.fields = {k: v.text() for k, v in m["fields"].mapping().items()}
            jobs[jid] = job

    actors: list[ActorSpec] = []
    actor_nodes = top["actors"].sequence()
    if len(actor_nodes) > MAX_ACTORS:
        raise top["actors"].fail(f"at most {MAX_ACTORS} actors, got {len(actor_nodes)}")
    for node in actor_nodes:
        m = node.mapping()
        if "kind" not in m and "python" not in m:
            raise node.fail("kind: missing (one of: " + ", ".join(ACTOR_KINDS) + ")")
        kind = m["kind"].choice(ACTOR_KINDS, "actor kind") if "kind" in m else "python"
        m = node.mapping(ACTOR_KEYS[kind])
        if "id" not in m:
            raise node.fail("id: missing (e.g. W1)")
        actor = ActorSpec(id=m["id"].text(), kind=kind, line=node.line)
        if not actor.id.isalnum() or not actor.id[0].isalpha():
            raise m["id"].fail(f"actor ids are letters and digits starting with a letter, got {actor.id!r}")
        if any(a.id.upper() == actor.id.upper() for a in actors):
            raise m["id"].fail(f"duplicate actor id {actor.id!r}")
        _fill_actor(actor, m, jobs, base_dir)
        actors.append(actor)
    actor_ids = {a.id for a in actors}
    for a in actors:
        if a.kind == "lease" and a.of is not None and a.of not in actor_ids:
            raise ScenarioError(f"{path}:{a.line}: actors.{a.id}.of: unknown actor {a.of!r}")
        if a.kind in ("crash", "disconnect"):
            if a.of is None:
                raise ScenarioError(f"{path}:{a.line}: actors.{a.id}.of: missing (the actor the {a.kind} hits)")
            target = next((t for t in actors if t.id == a.of), None)
            if target is None:
                raise ScenarioError(f"{path}:{a.line}: actors.{a.id}.of: unknown actor {a.of!r}"
                                    f" (actors: {', '.join(sorted(actor_ids))})")
            if target.kind in FAULT_KINDS or target.kind == "lease":
                raise ScenarioError(f"{path}:{a.line}: actors.{a.id}.of: a {a.kind} hits a process (a worker,"
                                    f" sweep, producer or canceller), not the {target.kind} {a.of!r}")
            if a.restart and target.kind != "worker":
                raise ScenarioError(f"{path}:{a.line}: actors.{a.id}.restart: only a worker restarts"
                                    f" ({a.of!r} is a {target.kind})")

    state: dict[str, Any] = {}
    locks: dict[str, str] = {}
    meta: dict[str, str] = {}
    metrics = False
    if "state" in top:
        sm = top["state"].mapping(STATE_KEYS)
        for name in PLACEMENT_FIELDS:
            if name not in sm:
                continue
            scored = name in ("delayed", "prioritized", "completed", "failed")
            if scored and isinstance(sm[name].node, yaml.MappingNode):
                state[name] = {jid: v.number() for jid, v in sm[name].mapping().items()}
            else:
                state[name] = sm[name].ids()
            for jid in state[name]:
                if jid not in jobs:
                    raise sm[name].fail(f"unknown job {jid!r} (declare it under jobs:)")
        if "locks" in sm:
            for jid, owner in sm["locks"].mapping().items():
                who = owner.text()
                if who not in actor_ids:
                    raise owner.fail(f"unknown actor {who!r} (actors: {', '.join(sorted(actor_ids))})")
                if jid not in jobs:
                    raise owner.fail(f"unknown job {jid!r}")
                locks[jid] = who
        if "meta" in sm:
            meta = {k: v.text() for k, v in sm["meta"].mapping().items()}
        if "metrics" in sm:
            metrics = sm["metrics"].boolean()


    places = _places(top["places"], jobs) if "places" in top else ()
    seed = _seed(top["seed"]) if "seed" in top else ()
    placed = {jid: name for name, ids in state.items() for jid in ids}
    placed.update({jid: p.key for p in places for jid in p.jobs})
    for a in actors:
        for jid in a.added:
            if jid in placed:
                field = "job" if a.kind == "producer" else "adds"
                raise ScenarioError(
                    f"{path}:{a.line}: actors.{a.id}.{field}: job {jid!r} is already in {placed[jid]} in the initial"
                    f" state; a producer adds a new job (remove it from state.{placed[jid]} or give the producer "
                    "another job)")

    modes = list(MODES)
    if "modes" in top:
        modes = [n.choice(MODES, "mode") for n in top["modes"].sequence()]

    invariants = _invariants(top["invariants"], base_dir, tuple(p.key for p in places)) \
        if "invariants" in top else ()
    kinds = (*ANOMALY_KINDS, *(i.kind for i in invariants))
    expect: dict[str, Expectation] = {}
    if "expect" in top:
        for mode, node in top["expect"].mapping(MODES).items():
            if mode not in modes:
                raise node.fail(f"mode {mode} is not among this scenario's modes ({', '.join(modes)})")
            if isinstance(node.node, yaml.SequenceNode):
                expect[mode] = Expectation([n.choice(kinds, "anomaly") for n in node.sequence()])
            else:
                em = node.mapping(("anomalies", "codes"))
                anomalies = [n.choice(kinds, "anomaly") for n in em["anomalies"].sequence()] \
                    if "anomalies" in em else []
                codes: dict[str, list[int]] = {}
                if "codes" in em:
                    for who, cn in em["codes"].mapping().items():
                        if who not in actor_ids:
                            raise cn.fail(f"unknown actor {who!r}")
                        codes[who] = [c.integer(-1000, 1000) for c in cn.sequence()]
                expect[mode] = Expectation(anomalies, codes)

    source = []
    if "source" in top:
        node = top["source"]
        source = node.ids() if isinstance(node.node, yaml.SequenceNode) else [node.text()]
    project = top["project"].text() if "project" in top else "bullmq"
    if not PROJECT_NAME.fullmatch(project):
        raise top["project"].fail("a project is its package's name: lower-case letters, digits, '.', '_', '-'"
                                  " (at most 40)")
    # (the headline may be one of the scenario's own invariants, invariant:<name>)
    anomaly = top["anomaly"].choice(("none", *kinds), "anomaly") if "anomaly" in top else "none"
    queue = top["queue"].text() if "queue" in top else "q"
    if "queue" in top:
        from emqlab.protocol.keys import QueueKeys

        try:
            QueueKeys(queue)
        except ValueError as e:
            raise top["queue"].fail(str(e)) from None
    bound = top["preemptions"].integer(0, MAX_PREEMPTIONS) if "preemptions" in top else None
    job_key, job_field = _job_key(top["job_key"]) if "job_key" in top else ("{job}", None)
    return Scenario(
        name=top["name"].text(),
        title=top["title"].text() if "title" in top else top["name"].text(),
        lesson=" ".join(top["lesson"].text().split()) if "lesson" in top else "",
        source=source,
        project=project,
        anomaly=anomaly,
        queue=queue,
        jobs=jobs,
        state=state,
        locks=locks,
        meta=meta,
        metrics=metrics,
        actors=actors,
        expect=expect,
        modes=modes,
        path=path,
        base_dir=base_dir,
        preemptions=bound,
        places=places,
        job_key=job_key,
        job_field=job_field,
        seed=seed,
        invariants=invariants,
    )


def _invariants(node: Node, base_dir: str | None = None, own: tuple[str, ...] = ()) -> tuple[InvariantSpec, ...]:
    """``invariants:``: a list of the scenario's own rules (:class:`emqlab.engine.specs.InvariantSpec`), each
    a ``name`` and one shape; a ``python`` rule's function is imported now (``base_dir`` first on the path),
    so a missing one is this file's error, not a broken rule in every run."""
    out: list[InvariantSpec] = []
    for item in node.sequence():
        m = item.mapping(INVARIANT_KEYS)
        if "name" not in m:
            raise item.fail("an invariant needs a name")
        name = m["name"].text()
        if not INVARIANT_NAME.fullmatch(name):
            raise m["name"].fail("lowercase letters, digits and '-', up to 63 characters")
        if any(i.name == name for i in out):
            raise m["name"].fail(f"a second invariant named {name!r}")
        shapes = [k for k in ("field", "counter", "exists_while_active", "python") if k in m]
        if len(shapes) != 1:
            raise item.fail("an invariant has one shape: field (with agrees), counter (with equals_count_in),"
                            " exists_while_active, or python")
        shape = shapes[0]
        needs = {"field": ("agrees",), "counter": ("equals_count_in",)}.get(shape, ())
        allowed = {"name", shape, *needs, *(("reads",) if shape == "python" else ())}
        for k in m:
            if k not in allowed:
                raise m[k].fail(f"not part of {'an' if shape[0] in 'aeiou' else 'a'} {shape} invariant (its keys:"
                                f" {', '.join(sorted(allowed))})")
        for k in needs:
            if k not in m:
                raise item.fail(f"{'an' if shape[0] in 'aeiou' else 'a'} {shape} invariant needs {k}")
        line = item.line
        if shape == "field":
            if not m["field"].text():
                raise m["field"].fail("the name of a field of the job's hash")
            agrees = m["agrees"].mapping()
            for place in agrees:
                if (place not in PLACEMENT_FIELDS or place == "stalled") and place not in own:
                    raise agrees[place].fail(f"not a place a job is in ({', '.join((*PLACES, *own))})")
            out.append(InvariantSpec(name, field=m["field"].text(),
                                     agrees=tuple((p, v.text()) for p, v in agrees.items()), line=line))
        elif shape == "counter":
            counter = m["counter"]
            if isinstance(counter.node, yaml.MappingNode):
                c = counter.mapping(("key", "field"))
                key, fld = _place_key(c["key"]), (c["field"].text() if "field" in c else None)
            else:
                key, fld = _place_key(counter), None
            place = m["equals_count_in"].choice((*PLACES, *own), "place")
            out.append(InvariantSpec(name, counter=key, counter_field=fld, equals_count_in=place, line=line))
        elif shape == "exists_while_active":
            out.append(InvariantSpec(name, exists_while_active=_place_key(m[shape], job=True), line=line))
        else:
            function = m["python"].text()
            if ":" not in function:
                raise m["python"].fail("module:function")
            if function != "emqlab.api:_placeholder":  # (the Python API puts the function itself in later)
                from emqlab.engine.pyref import resolve

                try:
                    resolve(function, base_dir, takes="(final, history): the final state and the run's history")
                except ValueError as e:
                    raise m["python"].fail(str(e)) from None
            reads = tuple(_place_key(n) for n in m["reads"].sequence()) if "reads" in m else ()
            out.append(InvariantSpec(name, python=function, reads=reads, line=line))
    return tuple(out)


#: the places an invariant may name
PLACES = tuple(p for p in PLACEMENT_FIELDS if p != "stalled")


def _place_key(node: Node, job: bool = False) -> str:
    """A key relative to the queue's base (letters, digits, ``_ . : -``; with ``job``, ``{job}`` too)."""
    text = node.text()
    if not PLACE_KEY.fullmatch(text.replace("{job}", "1") if job else text):
        raise node.fail("a key relative to the queue's base: letters, digits and _ . : -"
                        + (" ({job} for the job id)" if job else ""))
    return text


def _job_key(node: Node) -> tuple[str, str | None]:
    """``job_key:``: where a job's data lives — a key naming the job (``asynq:t:{job}``), or ``{key, field}``:
    a field naming the job in one hash (``{key: bq:jobs, field: "{job}"}``)."""
    if isinstance(node.node, yaml.MappingNode):
        m = node.mapping(("key", "field"))
        if "key" not in m or "field" not in m:
            raise node.fail("job_key as a mapping is {key, field}: the hash and the field naming the job")
        field = m["field"].text()
        if "{job}" not in field or not PLACE_KEY.fullmatch(field.replace("{job}", "1")):
            raise m["field"].fail("the field names the job: put {job} where its id goes")
        return _place_key(m["key"]), field
    key = _place_key(node, job=True)
    if "{job}" not in key:
        raise node.fail("a job's data key names the job: put {job} where its id goes (asynq:t:{job})")
    return key, None


#: the writes ``seed:`` may make (each adds to one key)
SEED_COMMANDS = ("HSET", "SADD", "RPUSH", "ZADD", "SET")


def _seed(node: Node) -> tuple[tuple[str, ...], ...]:
    """``seed:``: writes of the initial state in another queue's own layout, each ``[COMMAND, key, args…]``
    (a command of :data:`SEED_COMMANDS`, a key relative to the queue's base), written after the queue's own
    initial state."""
    out = []
    for n in node.sequence():
        parts = n.sequence()
        if len(parts) < 3:
            raise n.fail("a write: [COMMAND, key, argument…], e.g. [SADD, bq:stalling, \"1\"]")
        cmd = parts[0].text().upper()
        if cmd not in SEED_COMMANDS:
            raise parts[0].fail(f"seed: writes with {', '.join(SEED_COMMANDS)}, got {short(cmd)}")
        out.append((cmd, _place_key(parts[1]), *(p.text() for p in parts[2:])))
    return tuple(out)


def _places(node: Node, jobs: dict[str, JobSpec]) -> tuple[ExtraPlace, ...]:
    """``places:``: a list of ``{key, type, jobs, index, member, json_id}``, each a key (relative to the queue's base)
    the checks treat as a place a job can be in (:class:`emqlab.engine.effects.ExtraPlace`)."""
    from emqlab.protocol.keys import QUEUE_KEY_NAMES

    out: list[ExtraPlace] = []
    seen: set[str] = set()

    def key_of(n: Node) -> str:
        v = n.text()
        if not PLACE_KEY.fullmatch(v):
            raise n.fail(f"a key relative to the queue's base: 1 to 128 letters, digits, '_', '.', ':' or '-',"
                         f" got {short(v)}")
        if v in QUEUE_KEY_NAMES or v in jobs or v.endswith(":lock") or v.split(":")[0] in jobs:
            raise n.fail(f"{v!r} is a key of the queue or of a job; a place of the scenario's own needs a key"
                         " of its own (e.g. delayed:1000)")
        return v

    for pn in node.sequence():
        m = pn.mapping(PLACE_KEYS)
        if "key" not in m:
            raise pn.fail("key: missing (the place's key, relative to the queue's base, e.g. delayed:1000)")
        key = key_of(m["key"])
        if key in seen:
            raise m["key"].fail(f"duplicate place {key!r}")
        kind = m["type"].choice(("list", "zset", "set"), "place type") if "type" in m else "list"
        ids = m["jobs"].ids() if "jobs" in m else []
        for i, jid in enumerate(ids):
            if jid not in jobs:
                raise Node(m["jobs"].node.value[i], pn.path, f"{m['jobs'].where}[{i}]").fail(
                    f"unknown job {jid!r} (declare it under jobs:)")
        index = key_of(m["index"]) if "index" in m else None
        if index is not None and (index == key or index in seen):
            raise m["index"].fail(f"the index {index!r} must be a key of its own, not a place")
        if index is not None and "member" not in m:
            raise m["index"].fail("an index needs member: (what the index holds while the place is one, e.g."
                                  " the list's timestamp)")
        if "member" in m and index is None:
            raise m["member"].fail("member: is the index's member; give the index: too")
        member = m["member"].text() if "member" in m else None
        json_id = m["json_id"].text() if "json_id" in m else None
        if json_id is not None and not re.fullmatch(r"[A-Za-z0-9_]{1,64}", json_id):
            raise m["json_id"].fail(f"a JSON field name (letters, digits, '_'), got {short(json_id)}")
        seen.add(key)
        out.append(ExtraPlace(key, kind, index, member, tuple(ids), json_id))  # type: ignore[arg-type]
    indexes = {p.index for p in out if p.index}
    if indexes & seen:
        raise node.fail(f"{sorted(indexes & seen)[0]!r} is both a place and an index")
    return tuple(out)


def _fill_actor(spec: ActorSpec, m: dict[str, Node], jobs: dict[str, JobSpec], base_dir: str | None = None) -> None:
    setters: dict[str, Callable[[Node], Any]] = {
        "holds": lambda n: None if isinstance(n.node, yaml.ScalarNode) and n.scalar() is None else n.text(),
        "jobs": lambda n: n.integer(1, MAX_REPEATS),
        "finish": lambda n: n.choice(("completed", "failed"), "finish target"),
        "value": lambda n: n.json_value(),
        "mode": lambda n: n.choice(MODES if spec.kind == "worker" else ("atomic", "split"), "mode"),
        "python": lambda n: n.text(),
        "adds": lambda n: tuple(x.text() for x in n.sequence()),
        "with": lambda n: n.json_value(),
        "script": lambda n: n.text(),
        "fetch_next": lambda n: n.boolean(),
        "fetch_attempts": lambda n: n.integer(1, MAX_REPEATS),
        "keep_jobs": lambda n: n.keep_jobs(),
        "attempts": lambda n: n.integer(0, MAX_ATTEMPTS),
        "renewals": lambda n: n.integer(0, MAX_REPEATS),
        "max_stalled": lambda n: n.integer(0, MAX_ATTEMPTS),
        "runs": lambda n: n.integer(1, MAX_REPEATS),
        "job": lambda n: n.text(),
        "of": lambda n: n.text(),
        "on_error": lambda n: n.choice(ON_ERROR, "on_error"),
        "noscript": lambda n: n.choice(("fallback", "fail"), "noscript"),
        "lapse": lambda n: n.boolean(),
        "restart": lambda n: n.boolean(),
        "applied": lambda n: n.boolean(),
        "watch": lambda n: tuple(dict.fromkeys(x.choice(("lock", "active", "stalled"), "watched key")
                                               for x in n.sequence())),
    }
    for key, node in m.items():
        if key in ("id", "kind"):
            continue
        value = setters[key](node)
        if key == "script":
            spec.script = _script_path(str(value), base_dir, node)
            continue
        if key == "with":
            if not isinstance(value, dict):
                raise node.fail(f"expected a mapping of parameters, got {type(value).__name__}")
            spec.params = value
            continue
        if key in ("holds", "job") and value is not None and value not in jobs:
            raise node.fail(f"unknown job {value!r} (declare it under jobs:)")
        if key == "adds":
            for jid in value:
                if jid not in jobs:
                    raise node.fail(f"unknown job {jid!r} (declare it under jobs:)")
        setattr(spec, key, value)
    if spec.kind == "python":
        if spec.python is None:
            raise ScenarioError(f"{m['id'].path}:{spec.line}: actors.{spec.id}.python: missing (module:function, a"
                                " function f(r, q) over a redis-py client)")
        try:
            resolve(spec.python, base_dir)
        except ValueError as e:
            raise m["python"].fail(str(e)) from None
    if spec.kind in ("lease", "producer", "canceller") and spec.job is None:
        raise ScenarioError(f"{m['id'].path}:{spec.line}: actors.{spec.id}.job: missing (required for a {spec.kind})")


def _script_path(text: str, base_dir: str | None, node: Node) -> str:
    """An actor's ``script:``: a path relative to the scenario file's folder, else to emqlab's script folder
    (``variants/no-active-check``); checked here (it must exist, be named ``<name>-<numkeys>.lua`` or be a
    variant folder, replace a script of emqlab's set with the same KEYS count, and compile)."""
    from emqlab.scripting.registry import ScriptError, default_scripts, lua_dir

    candidates = [Path(base_dir) / text] if base_dir else []
    candidates += [Path(text), lua_dir() / text]
    path = next((p for p in candidates if p.exists()), None)
    if path is None:
        raise node.fail(f"no script file or folder {text!r} (looked in "
                        f"{', '.join(str(p.parent) for p in candidates)})")
    try:
        default_scripts().overlay(path)
    except ScriptError as e:
        raise node.fail(str(e)) from None
    return str(path.resolve())


# -- the shipped library ------------------------------------------------------------------------------------


def _shipped_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "scenarios"


def shipped_names() -> list[str]:
    return sorted(p.stem for p in _shipped_dir().glob("*.yaml"))


def shipped_path(name: str) -> Path | None:
    p = _shipped_dir() / f"{name}.yaml"
    return p if p.is_file() else None


def shipped() -> list[Scenario]:
    """Every shipped scenario, sorted by name."""
    return [load(n) for n in shipped_names()]


__all__ = ["ACTOR_KINDS", "ACTOR_KEYS", "ANOMALY_KINDS", "FAULT_KINDS", "JOB_ID", "JOB_KEYS", "KEEP_JOBS_KEYS",
           "MAX_ACTORS", "MAX_ATTEMPTS", "MAX_DATA_DEPTH", "MAX_DATA_INT", "MAX_FILE_BYTES", "MAX_JOBS", "MAX_MS",
           "MAX_PREEMPTIONS", "MAX_PRIORITY", "MAX_REPEATS", "MAX_SCORE", "MAX_YAML_DEPTH", "MODES", "ON_ERROR",
           "PLACEMENT_FIELDS", "PLACE_KEY", "PLACE_KEYS", "STATE_KEYS", "TOP_KEYS", "ActorSpec", "Expectation",
           "JobSpec", "Scenario", "ScenarioError", "load", "loads", "shipped", "shipped_names", "shipped_path"]
