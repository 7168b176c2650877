"""A script emqlab runs reaches nothing but its run's keys (issue 25, item 3): the Lua host refuses a command
that names a key outside the run's prefix or reaches every key, another database or server, for every
script it runs, split or atomic; on a live server a script that is not emqlab's own runs through the host
in its atomic step too. A planted script that lists and deletes every key leaves every foreign key
byte-identical (DUMP), and the run says why it stopped."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from emqlab.backend.connect import clean, live_url
from emqlab.engine import scenario
from emqlab.engine.runner import Runner
from emqlab.scripting.registry import default_scripts, shipped
from emqlab.scripting.rules import confine
from emqlab.ui.cli import main
from tests.conftest import live_conn

BASE = b"emq:{q-0123abcd}:"


@pytest.mark.parametrize(("command", "why"), [
    ((b"GET", BASE + b"wait"), None),
    ((b"LMOVE", BASE + b"wait", BASE + b"active", b"LEFT", b"RIGHT"), None),
    ((b"PING",), None),
    ((b"TIME",), None),
    ((b"DEL", b"foreign"), "DEL names key 'foreign'"),
    ((b"LMOVE", BASE + b"wait", b"emq:{q}:active", b"LEFT", b"RIGHT"), "LMOVE names key 'emq:{q}:active'"),
    ((b"DEL", b"emq:{q-0123abcd}"), "DEL names key 'emq:{q-0123abcd}'"),  # (the prefix without its colon)
    ((b"KEYS", b"*"), "KEYS reaches every key"),
    ((b"SCAN", b"0"), "SCAN reaches every key"),
    ((b"FLUSHALL",), "FLUSHALL reaches every key"),
    ((b"FLUSHDB", b"ASYNC"), "FLUSHDB reaches every key"),
    ((b"RANDOMKEY",), "RANDOMKEY reaches every key"),
    ((b"SORT", BASE + b"l", b"BY", b"foreign*"), "SORT reaches every key"),
    ((b"SWAPDB", b"0", b"1"), "SWAPDB reaches every key"),
    ((b"SELECT", b"1"), "SELECT reaches beyond its keys"),
    ((b"PUBLISH", b"ch", b"m"), "PUBLISH reaches beyond its keys"),
    ((b"MOVE", BASE + b"wait", b"1"), "MOVE reaches another database or server"),
    ((b"COPY", BASE + b"a", BASE + b"b", b"DB", b"1"), "COPY reaches another database or server"),
    ((b"MIGRATE", b"host", b"6379", BASE + b"a", b"0", b"1000"), "MIGRATE reaches another database or server"),
    # Redis reads an option word up to its first NUL: "STORE\0" is STORE, "DB\0" is DB
    ((b"SORT", BASE + b"x", b"BY\0", b"nosort", b"GET\0", b"attack:v_*"), "SORT reaches every key"),
    ((b"SORT", BASE + b"x", b"STORE\0", b"attack:victim"), "SORT names key 'attack:victim'"),
    ((b"SORT_RO", BASE + b"x", b"GET\0", b"attack:v_*"), "SORT_RO reaches every key"),
    ((b"GEORADIUS", BASE + b"g", b"0", b"0", b"1", b"km", b"STORE\0", b"attack:geo"),
     "GEORADIUS names key 'attack:geo'"),
    ((b"GEORADIUS", BASE + b"g", b"0", b"0", b"1", b"km", b"STOREDIST\0", b"attack:geo"),
     "GEORADIUS names key 'attack:geo'"),
    ((b"COPY", BASE + b"a", BASE + b"b", b"DB\0", b"1"), "COPY reaches another database or server"),
    ((b"SET", BASE + b"a\0b", b"v"), None),  # (a key of the run with a NUL in its name)
])
def test_a_command_outside_the_run_is_refused_with_what_it_reached(command: tuple[bytes, ...],
                                                                    why: str | None) -> None:
    refusal = confine(command, BASE)
    if why is None:
        assert refusal is None
    else:
        assert refusal is not None and refusal.startswith(b"NOPERM ") and refusal.endswith(why.encode())


def test_every_shipped_scenario_script_stays_inside_its_run() -> None:
    """emqlab's own scripts never trip the rule: every scenario's runs go through the confined host on
    fakeredis (tests/test_golden.py holds their reports), and each shipped script is 'shipped'."""
    assert all(shipped(default_scripts()[name]) for name in default_scripts().names())


EVIL = {
    "keys-del": "local ks = redis.call('KEYS', '*')\nfor i = 1, #ks do redis.call('DEL', ks[i]) end\nreturn 0\n",
    "pcall-flush-then-del": "redis.pcall('FLUSHALL')\nredis.pcall('SELECT', '1')\n"
                            "return redis.call('DEL', 'emqlab-test:foreign:1')\n",
    "copy-out": "redis.call('COPY', KEYS[1], 'emqlab-test:foreign:copy')\nreturn 0\n",
}


@pytest.mark.live
@pytest.mark.parametrize("mode", ["--split", "--atomic"])
@pytest.mark.parametrize("evil", sorted(EVIL))
def test_a_planted_script_leaves_every_foreign_key_byte_identical(evil: str, mode: str, tmp_path: Path) -> None:
    conn = live_conn()
    foreign = {f"emqlab-test:foreign:{i}": f"precious {i}" for i in range(5)}
    for k, v in foreign.items():
        conn.set(k, v)
    before = {k: conn.dump(k) for k in foreign}
    (tmp_path / "moveToFinished-14.lua").write_text(EVIL[evil])
    try:
        res = CliRunner().invoke(main, ["simulate", mode, "-s", "two-workers", "--lua", str(tmp_path),
                                        "--redis", live_url()])
        assert {k: conn.dump(k) for k in foreign} == before
        assert conn.exists("emqlab-test:foreign:copy") == 0
        text = " ".join(res.output.split())
        assert res.exit_code == 3 and "NOPERM emqlab runs a script on its run's keys only" in text, res.output
    finally:
        conn.delete(*foreign, "emqlab-test:foreign:copy")
        clean(conn)


@pytest.mark.parametrize("mode", ["split", "atomic"])
def test_the_refusal_is_the_same_on_the_embedded_server(mode: str, tmp_path: Path) -> None:
    """On fakeredis the same script gets the same refusal (the host runs it there in both modes)."""
    (tmp_path / "moveToFinished-14.lua").write_text(EVIL["keys-del"])
    scripts = default_scripts().overlay(tmp_path)
    assert not shipped(scripts["moveToFinished"])
    with Runner(scenario.load("two-workers"), mode, scripts=scripts) as r:
        with pytest.raises(Exception, match="NOPERM emqlab runs a script on its run's keys only .* KEYS reaches"):
            r.run()
