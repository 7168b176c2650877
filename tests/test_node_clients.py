"""BullMQ's Node client (npm's ``bullmq``, pinned, with its ioredis) against ``emqlab server`` and against the
live Redis, side by side: standard, delayed and prioritized jobs, a retry with backoff, a job that fails for
good, a FlowProducer parent with two children, a job whose worker died recovered by another worker's stalled
check, QueueEvents, and obliterate — the same outcome on both.

The package is installed from the npm registry at test time into ``$EMQLAB_NODE_DIR`` (default: a folder
under the temporary directory), kept for the next run."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from emqlab.backend.tcp import serve
from tests.conftest import live_conn, require

BULLMQ = "5.34.0"
SCRIPT = Path(__file__).parent / "node" / "bullmq-e2e.js"
NODE_DIR = Path(os.environ.get("EMQLAB_NODE_DIR") or Path(tempfile.gettempdir()) / "emqlab-node")


@pytest.fixture(scope="module")
def node_modules() -> Path:
    if not (shutil.which("node") and shutil.which("npm")):
        require("Node.js and npm", "apt-get install nodejs npm")
    installed = NODE_DIR / "node_modules" / "bullmq" / "package.json"
    if not installed.exists() or json.loads(installed.read_text())["version"] != BULLMQ:
        NODE_DIR.mkdir(parents=True, exist_ok=True)
        (NODE_DIR / "package.json").write_text('{"name": "emqlab-node-clients", "private": true}\n')
        res = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", f"bullmq@{BULLMQ}"],
                             cwd=NODE_DIR, capture_output=True, text=True, timeout=600)
        if res.returncode:
            require(f"npm's bullmq@{BULLMQ}", f"npm install failed: {res.stderr.strip()[-300:]}")
    return NODE_DIR / "node_modules"


def _run(modules: Path, url: str, prefix: str) -> dict[str, object]:
    res = subprocess.run(["node", str(SCRIPT), url, prefix], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "NODE_PATH": str(modules)})
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.live
def test_bullmq_node_gives_the_same_outcome_on_emqlab_server_and_on_redis(node_modules: Path) -> None:
    with serve() as tcp:
        embedded = _run(node_modules, tcp.url, "emqlab-e2e")
    conn = live_conn()
    prefix = f"emqlab-e2e-{secrets.token_hex(4)}"
    try:
        live = _run(node_modules, os.environ.get("EMQLAB_REDIS_URL") or "redis://127.0.0.1:6379/0", prefix)
    finally:
        for key in conn.scan_iter(match=f"{prefix}:*", count=500):  # (only this run's own keys)
            conn.delete(key)
    assert embedded == live
    assert embedded["counts"] == {"wait": 0, "active": 0, "delayed": 0, "prioritized": 0, "completed": 7,
                                  "failed": 1}
    jobs = embedded["jobs"]
    assert isinstance(jobs, dict) and jobs["d"]["attemptsMade"] == 2 and jobs["e"]["state"] == "failed"
    # the flow's parent ran after its two children and read their values (6*2 + 7*2)
    assert jobs["p"]["returnvalue"] == {"sum": 26, "children": 2}
    assert [jobs[c]["state"] for c in ("f1", "f2", "p")] == ["completed"] * 3
    # the abandoned job was found stalled, moved back to wait and run by the second worker
    assert embedded["stalled"] == {"taken": "s", "state": "completed", "returnvalue": {"doubled": 16},
                                   "events": [["completed", "s"], ["stalled", "s"]]}
