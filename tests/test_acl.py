"""ACL-ready (issue 15, item 7): under a Redis ACL user limited to emqlab's key pattern and command list
(emqlab.scripting.acl, one table), the scenarios run in every mode without a single NOPERM, on a server the test
starts itself (a shared server's users are never changed); a command outside the list is refused."""

from __future__ import annotations

import pytest
import redis
from click.testing import CliRunner

from emqlab.backend.connect import connect
from emqlab.engine import scenario
from emqlab.explore import explore
from emqlab.scripting import acl
from emqlab.timing import TimingConfig, simulate
from emqlab.ui.cli import main
from tests.conftest import own_redis_server


def test_the_command_list_is_one_table_with_the_scripts_commands() -> None:
    cmds = acl.commands()
    assert {"EVALSHA", "SCRIPT|LOAD", "LPOS", "XADD", "RPOPLPUSH", "WATCH", "EXEC"} <= set(cmds)
    assert "FLUSHDB" not in cmds and "FLUSHALL" not in cmds and "CONFIG" not in cmds and "KEYS" not in cmds
    assert acl.setuser_rules("pw")[:5] == ["reset", "on", ">pw", "~emq:{q-*", "-@all"]


@pytest.fixture(scope="module")
def restricted_url() -> str:
    with own_redis_server() as url:
        admin = redis.Redis.from_url(url)
        admin.execute_command("ACL", "SETUSER", "emqlab", *acl.setuser_rules("s3cret"))
        admin.close()
        yield url.replace("redis://", "redis://emqlab:s3cret@")


@pytest.mark.parametrize(("name", "mode"), [("stalled-finish", "split"), ("stalled-finish", "atomic"),
                                            ("lease-lapse", "finish-then-fetch"), ("cancel-active", "transaction"),
                                            ("crash-mid-finish", "split"), ("delayed-promotion", "atomic"),
                                            ("metrics-drift", "split"), ("remove-on-complete", "atomic")])
def test_scenarios_run_under_the_restricted_user(restricted_url: str, name: str, mode: str) -> None:
    sc = scenario.load(name)
    rep = explore(sc, mode, conn=connect(restricted_url))  # a NOPERM would stop it (report.stopped)
    assert rep.stopped is None and not rep.aborted, rep.infrastructure()
    assert rep.complete and rep.anomaly_kinds == sorted(sc.expect[mode].anomalies)


def test_timed_runs_and_the_cli_run_under_the_restricted_user(restricted_url: str) -> None:
    r = simulate("split", TimingConfig(jobs=6, workers=2, rtt_ms=1), connect(restricted_url))
    assert r.finishes >= 6
    res = CliRunner().invoke(main, ["simulate", "--split", "--redis", restricted_url])
    assert res.exit_code == 0, res.output
    assert "s3cret" not in res.output
    res = CliRunner().invoke(main, ["clean", "--redis", restricted_url])
    assert res.exit_code == 0, res.output


def test_the_restricted_user_cannot_flush_or_touch_other_keys(restricted_url: str) -> None:
    c = redis.Redis.from_url(restricted_url)
    with pytest.raises(redis.exceptions.NoPermissionError):
        c.flushdb()
    with pytest.raises(redis.exceptions.NoPermissionError):
        c.set("someone-else:key", "x")
    c.close()


def test_the_live_suite_core_passes_under_a_restricted_user() -> None:
    """The live tests' core (the live scenario cases and witness replays of test_simulate, the clean-up tests)
    in a pytest subprocess with EMQLAB_REDIS_URL = a user limited to emqlab.scripting.acl's patterns and commands and
    EMQLAB_ADMIN_URL = the server's default user (the foreign-keys guard): it passes, with no NOPERM."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    with own_redis_server() as url:
        admin = redis.Redis.from_url(url)
        admin.execute_command("ACL", "SETUSER", "emqlab", *acl.setuser_rules("s3cret"))
        admin.close()
        env = {**os.environ, "EMQLAB_REDIS_URL": url.replace("redis://", "redis://emqlab:s3cret@"),
               "EMQLAB_ADMIN_URL": url, "CI": "true"}
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                              "tests/test_simulate.py", "tests/test_clean.py"], cwd=root, env=env,
                             capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "NOPERM" not in out and "no permissions" not in out, out[-3000:]
    summary = out.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, summary
