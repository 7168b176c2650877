"""Nothing runs forever (issue 25, item 4): every script the Lua host runs and every script the embedded
server runs ends at its limits — Lua instructions and CPU seconds over the whole run, commands sent (host),
and the Lua heap — with a clear error that names the setting, and the runtime stays usable afterwards.
(How long each default takes: benchmarks/bench_script_limits.py, docs/benchmarks.md.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from emqlab.backend.connect import connect
from emqlab.backend.fakeserver import fake_server
from emqlab.scripting.host import LuaHost
from emqlab.scripting.replies import LuaScriptError
from emqlab.scripting.sandbox import DEFAULT_MAX_COMMANDS, DEFAULT_MAX_INSTRUCTIONS, DEFAULT_MAX_SECONDS
from emqlab.ui.cli import main

#: bomb -> (its text, what ends it on a small host)
BOMBS = {
    "bare loop": ("while true do end", "Lua instructions in one run"),
    "loop between calls": ("while true do for i = 1, 10000 do end redis.call('PING') end", "Lua instructions"),
    "growing table": ("local t = {} while true do t[#t + 1] = 1 end", "(not enough memory|Lua instructions)"),
    "string.rep": ("return #string.rep('x', 2 ^ 30)", "not enough memory"),
    "doubling string": ("local s = 'x' while true do s = s .. s end", "not enough memory"),
    "loop of redis.call": ("while true do redis.call('PING') end", "commands in one run"),
    "coroutine loop": ("while true do coroutine.wrap(function() end)() end", "Lua instructions"),
    "colliding strings": ("local t = {} for i = 1, 1e9 do t[i] = string.rep('y', 1000) .. i end", "of CPU"),
}


def _small_host() -> LuaHost:
    return LuaHost(max_instructions=2_000_000, max_commands=500, max_memory=32 << 20, max_seconds=0.5)


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_each_bomb_ends_at_its_limit_on_the_host_and_the_host_goes_on(name: str) -> None:
    text, why = BOMBS[name]
    host, conn = _small_host(), connect()
    with pytest.raises(LuaScriptError, match=f"emqlab host: .*{why}.*LuaHost\\(max_"):
        host.run(conn, text.encode(), [], [])
    assert host.live_runs == 0
    assert host.run(conn, b"local t = {} for i = 1, 1000 do t[i] = i end return #t", [], []) == 1000


def test_the_budget_counts_the_whole_run_not_each_step() -> None:
    """A split run's steps share one budget: 300 commands with about 10,000 instructions each between them
    is 3M instructions, over a budget of 2M although no one step comes near it."""
    host = LuaHost(max_instructions=2_000_000)
    run = host.start(b"for n = 1, 300 do for i = 1, 10000 do end redis.call('PING') end return 1", [], [])
    steps = 0
    while run.pending is not None:
        run.resume(b"PONG")
        steps += 1
    assert run.error is not None and "Lua instructions in one run" in str(run.error) and 100 < steps < 300


def test_the_defaults_are_the_documented_ones() -> None:
    host = LuaHost()
    assert (host.max_instructions, host.max_commands, host.max_memory) == (
        DEFAULT_MAX_INSTRUCTIONS, DEFAULT_MAX_COMMANDS, 256 << 20) and DEFAULT_MAX_SECONDS == 5.0


@pytest.mark.parametrize("name", ["bare loop", "growing table", "string.rep"])
def test_the_embedded_server_ends_them_too(name: str) -> None:
    text, _why = BOMBS[name]
    with fake_server():
        r = redis.Redis()
        with pytest.raises(redis.exceptions.ResponseError, match="emqlab server: "):
            r.eval(text, 0)
        assert r.eval("return 1", 0) == 1


def test_a_bomb_under_lua_ends_with_its_error_in_the_report_and_check_says_fails(tmp_path: Path) -> None:
    (tmp_path / "moveToFinished-14.lua").write_text(BOMBS["growing table"][0] + "\n")
    res = CliRunner().invoke(main, ["check", "--lua", str(tmp_path / "moveToFinished-14.lua"), "-s", "two-workers"])
    text = " ".join(res.output.split())
    assert res.exit_code == 1 and "emqlab host: not enough memory" in text and "verdict: fails" in text


@pytest.mark.parametrize(("call", "refused"), [
    ("string.find(string.rep('a', 600), '.-.-.-b')", True),   # (26 s unguarded: no hook runs inside the matcher)
    ("string.match(string.rep('1', 100000), '%d+x')", True),
    ("string.gsub(string.rep('a', 3000), 'a*a*b', '')", True),
    ("string.find(string.rep('a', 600), '.-.-.-b', 1, true)", False),  # plain: no pattern
    ("string.match('12-34', '(%d+)-(%d+)')", False),
    ("string.find(string.rep('x', 100000), 'y')", False),
    ("('a'):rep(600):find('.-.-.-b')", True),  # through the string metatable too
])
def test_a_pattern_match_whose_bound_is_too_high_is_refused_before_it_runs(call: str, refused: bool) -> None:
    host, conn = LuaHost(), connect()
    if refused:
        with pytest.raises(LuaScriptError, match="matcher steps .* the limit is 1e\\+09"):
            host.run(conn, f"return {call}".encode(), [], [])
    else:
        host.run(conn, f"return {call}".encode(), [], [])
