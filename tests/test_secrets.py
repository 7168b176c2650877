"""A password in a Redis URL never reaches an output: stdout, stderr, --json, the files a command writes.

Each case runs a CLI command with a URL that carries SECRET (as the password, in user-info or as
``?password=``) and greps everything the command produced. The live server has no AUTH configured: its
``default`` user takes any password (``nopass``), so ``redis://default:SECRET@…`` connects and the run goes
on (the password must be masked in the replay line, the JSON, the CSV); a named user that does not exist
fails AUTH; other URLs fail elsewhere (unreachable port, unknown option, bad database, bad port, a schedule
that does not fit).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner, Result

from emqlab.backend.connect import BackendError, _redact, connect, live_url, url_secrets
from emqlab.protocol.verdict import ExitCode
from emqlab.ui.cli import main
from tests.conftest import live_conn

SECRET = "S3cr3t-pw-XYZZY"
SECRET_QUOTED = "S3cr3t%40pw-XYZZY"  # percent-encoded @ in the password: S3cr3t@pw-XYZZY


def _hostport() -> str:
    parts = urlsplit(live_url())
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}"


def _url(userinfo: str, tail: str = "/0") -> str:
    return f"redis://{userinfo}@{_hostport()}{tail}"


def _run(args: list[str], env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, args, env=env, catch_exceptions=True)


def _assert_clean(res: Result, *files: Path, secrets: tuple[str, ...] = (SECRET,)) -> str:
    """Every output of ``res`` (and ``files``) is free of the secrets; returns the combined text."""
    texts = [res.stdout, res.stderr, res.output]
    texts += [f.read_text(encoding="utf-8", errors="replace") for f in files if f.exists()]
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        texts.append(repr(res.exception))
    joined = "\n".join(texts)
    for s in secrets:
        assert s not in joined, joined
        assert s.replace("-", "%2D") not in joined
    assert "Traceback" not in joined
    return joined


def test_redact_masks_userinfo_query_and_known_passwords() -> None:
    assert _redact(f"x redis://u:{SECRET}@h:1/0 y") == "x redis://u:***@h:1/0 y"
    assert _redact(f"'rediss://:{SECRET}@h/0'") == "'rediss://:***@h/0'"
    assert _redact(f"redis://h/0?db=1&password={SECRET}") == "redis://h/0?db=1&password=***"
    assert _redact("redis://u:p@ss@h/0") == "redis://u:***@h/0"  # an @ inside the password
    assert _redact(f"AUTH said {SECRET}", url_secrets(_url(f"u:{SECRET}"))) == "AUTH said ***"
    assert "S3cr3t@pw-XYZZY" in url_secrets(_url(f"u:{SECRET_QUOTED}"))
    assert _redact("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize(("url", "words"), [
    (f"redis://u:{SECRET}@127.0.0.1:1/0", "cannot reach Redis at redis://u:***@127.0.0.1:1/0"),
    (f"redis://u:{SECRET}@127.0.0.1:6379/0?foo=1", "unknown option foo"),
    (f"redis://u:{SECRET}@127.0.0.1:6379/abc", "the database 'abc' is not a number"),
    (f"redis://u:{SECRET}@127.0.0.1:notaport/0", "malformed Redis URL"),
    (f"redis://u:{SECRET}@[::1/0", "malformed Redis URL"),
    (f"http://u:{SECRET}@127.0.0.1/0", "malformed Redis URL"),
    (f"redis://127.0.0.1:1/0?password={SECRET}", "cannot reach Redis"),
])
def test_failures_before_any_server_answers_mask_the_password(url: str, words: str) -> None:
    with pytest.raises(BackendError) as info:
        connect(url)
    assert SECRET not in str(info.value) and words in str(info.value)
    for args in (["simulate", "--split", "--redis", url], ["simulate", "--split", "--redis", url, "--json"],
                 ["replay", "v1:W1*9.S1", "--split", "--redis", url],
                 ["sweep-rtt", "--modes", "atomic", "--rtt", "1", "--jobs", "2", "--redis", url, "--json"]):
        res = _run(args)
        assert res.exit_code in (ExitCode.USAGE, ExitCode.INFRASTRUCTURE), res.output
        out = _assert_clean(res)
        assert words in " ".join(out.split())


def test_a_bad_url_in_the_environment_is_masked_too() -> None:
    res = _run(["simulate", "--split", "--redis", "live"], env={"EMQLAB_REDIS_URL": f"redis://u:{SECRET}@[::1/0"})
    assert res.exit_code == ExitCode.USAGE
    assert "(from $EMQLAB_REDIS_URL)" in _assert_clean(res)


@pytest.mark.live
def test_failed_auth_masks_the_password() -> None:
    live_conn()
    url = _url(f"emqlab-no-such-user:{SECRET}")
    res = _run(["simulate", "--split", "--redis", url])
    assert res.exit_code == ExitCode.INFRASTRUCTURE, res.output
    out = _assert_clean(res)
    assert "authentication failed at redis://emqlab-no-such-user:***@" in out


def _good_url(tail: str = "/0", password: str = SECRET) -> str:
    """A URL whose password the live server accepts (its default user has none: any password works)."""
    live_conn()
    url = _url(f"default:{password}", tail)
    try:
        connect(url).close()
    except BackendError as e:
        pytest.skip(f"the live server refuses AUTH default <any password> ({e}): it has a password set")
    return url


@pytest.mark.live
def test_a_run_that_connects_masks_the_password_in_every_output(tmp_path: Path) -> None:
    url = _good_url()
    res = _run(["simulate", "--split", "--redis", url])
    assert res.exit_code == 0, res.output
    out = _assert_clean(res)
    assert "replay: emqlab replay 'v1:" in out and "--redis redis://default:***@" in out
    res = _run(["simulate", "--split", "--redis", url, "--json"])
    assert res.exit_code == 0
    _assert_clean(res)
    res = _run(["replay", "v1:W1*9.S1", "--split", "--redis", url, "--json"])
    assert res.exit_code == 0 and '"verdict": "fails"' in res.stdout
    _assert_clean(res)
    csv = tmp_path / "rtt.csv"
    res = _run(["sweep-rtt", "--modes", "atomic", "--rtt", "1", "--jobs", "2", "--workers", "1", "--redis", url,
                "--json", "--csv", str(csv)])
    assert res.exit_code == 0, res.output
    assert csv.stat().st_size > 0
    _assert_clean(res, csv)


@pytest.mark.live
def test_percent_encoded_and_query_passwords_are_masked() -> None:
    url = _good_url(password=SECRET_QUOTED)
    res = _run(["simulate", "--split", "--redis", url])
    assert res.exit_code == 0, res.output
    _assert_clean(res, secrets=(SECRET_QUOTED, "S3cr3t@pw-XYZZY"))
    q = _good_url(f"/0?password={SECRET}")
    res = _run(["simulate", "--split", "--redis", q])
    assert res.exit_code == 0, res.output
    assert "password=***" in _assert_clean(res)


@pytest.mark.live
def test_failures_after_connecting_mask_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    url = _good_url()
    res = _run(["replay", "v1:W1*30", "--split", "--redis", url])  # the schedule does not fit
    assert res.exit_code == ExitCode.USAGE
    assert "has no step left" in _assert_clean(res)
    res = _run(["simulate", "--split", "--redis", url, "--scenario", "no-such-scenario"])
    assert res.exit_code == ExitCode.USAGE
    _assert_clean(res)

    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError(f"unexpected, while talking to {url} with {SECRET}")

    monkeypatch.setattr(importlib.import_module("emqlab.ui.cli.explore"), "_load", boom)
    for env in ({}, {"EMQLAB_DEBUG": "1"}):
        res = _run(["simulate", "--split", "--redis", url], env=env)
        assert res.exit_code == ExitCode.INTERNAL, res.output
        assert "internal error: RuntimeError" in res.stderr
        for s in (SECRET,):
            assert s not in res.output
        if env:
            assert "Traceback" in res.stderr  # --debug shows it, masked
        else:
            assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1


@pytest.mark.live
def test_the_real_streams_of_a_subprocess_are_clean(tmp_path: Path) -> None:
    url = _good_url()
    env = {**os.environ, "EMQLAB_REDIS_URL": url}
    run = subprocess.run([sys.executable, "-c", "from emqlab.ui.entry import entry; entry()", "simulate", "--split",
                          "--redis", "live", "--fail-on-anomaly"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == ExitCode.FAILS, run.stderr
    assert SECRET not in run.stdout + run.stderr
    assert "--redis live" in run.stdout  # the replay line names the URL as given


@pytest.mark.parametrize("executor", [f"tcp://u:{SECRET}@127.0.0.1:1", f"dask://u:{SECRET}@127.0.0.1:1",
                                      f"tls://:{SECRET}@127.0.0.1:1", f"u:{SECRET}@127.0.0.1:1"])
def test_an_executor_address_with_a_password_is_refused_and_masked(executor: str) -> None:
    """Issue 25, item 7: Dask took ``--executor tcp://u:pw@…`` for an address and echoed ``u:pw@…`` in its
    error, without the scheme that the URL masking looks for. A Dask address has no user-info (a cluster
    is secured with TLS certificates): such an address is a usage error, its password masked."""
    from emqlab.explore.pool import ParallelError, make_executor

    res = _run(["simulate", "--split", "--scenario", "two-workers", "--jobs", "2", "--executor", executor])
    assert res.exit_code == ExitCode.USAGE, res.output
    _assert_clean(res)
    assert res.stderr.startswith("error: ") and "***" in res.stderr and res.stderr.count("\n") == 1
    with pytest.raises(ParallelError) as info:
        make_executor(2, executor)
    assert SECRET not in str(info.value) and "***" in str(info.value)
