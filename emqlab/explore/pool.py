"""The home of where a divided exploration's parts run: the executors (:func:`make_executor`: this process,
a local process pool, a Dask cluster), the dispatch that feeds them the subtrees handed on
(:class:`Dispatch`), the fork server and resource tracker started with the stop signals held back, the waits
for the workers, and what a stop signal does to them; the same pool for a list of other calls
(:func:`run_in_order`: sweep-rtt's grid). The stop signals themselves are :mod:`emqlab.explore.stops`'s.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from emqlab.backend.connect import BackendError, _redact, is_fake, url_secrets
from emqlab.engine.runner import Runner
from emqlab.explore.parts import (
    Job,
    Part,
    Task,
    _drop_runner,
    _local,
    _running,
    _stopping,
    run_part,
    warm_part,
    worker_init,
)
from emqlab.explore.stops import STOP_SIGNALS, at_next_call, exit_with_parent, stops_held
from emqlab.explore.tree import Branch
from emqlab.protocol.schedules import format_schedule, parse_schedule

Progress = Callable[[int, int | None], None]
T = TypeVar("T")



#: a local pool starts once the search has run this long (s): a shorter one runs every part here, where a
#: pool would cost it more than it saves (the fork's copy-on-write faults, the pool's thread, its shutdown)
WARM_AFTER_S = 0.1


class ParallelError(ValueError):
    """An executor could not be set up (Dask missing, a bad ``--executor``); the message is one line."""


class ExecutorUnreachable(BackendError):
    """The Dask scheduler named by ``--executor`` does not answer (an infrastructure error: exit 4)."""


def _on_sigint(signum: int, frame: Any) -> None:
    """A stop signal in a worker (Ctrl-C, or SIGTERM / SIGHUP to the process group: a CI timeout, a closed
    terminal): interrupt the part (or :func:`stoppable` call) it is running, once; between them it is ignored
    (the coordinator shuts the pool down, and the worker's exit deletes its live keys). Every later one is
    ignored, so it cannot cut short the clean-up the first one started (the terminal's process group and the
    coordinator both send one). Either way the worker starts no part after it
    (:data:`~emqlab.explore.parts._stopping`)."""
    _stopping.set()
    if _running.is_set():
        for s in STOP_SIGNALS:
            signal.signal(s, _ignore)
        raise KeyboardInterrupt


def _ignore(signum: int, frame: Any) -> None:
    """A stop signal that comes while the clean-up of an earlier one runs: nothing. (A Python handler, not
    SIG_IGN: a signal already caught but not yet handled when the handler becomes SIG_IGN raises OSError,
    "Signal 15 ignored due to race condition", inside that clean-up.)"""


def _raise_stop() -> None:
    if _running.is_set():
        raise KeyboardInterrupt


def _unraisable(unraisable: Any) -> None:
    """A worker's stop (:func:`_on_sigint`) raised inside a finalizer's ``__del__``: Python printed it with a
    traceback and dropped it. Nothing is printed; the part it was to stop is stopped at the next call."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _stopping.is_set():
        if threading.current_thread() is threading.main_thread():
            at_next_call(_raise_stop, after=sys._getframe())  # (once this hook has returned)
        return
    sys.__unraisablehook__(unraisable)


def _pool_init(back: Any = None) -> None:
    """A pool worker: Ctrl-C interrupts the part it is running (its live keys are deleted), and is ignored
    between parts; the cached runner is closed when the worker exits. ``back``: the channel its parts' hand-
    ons stream through (:data:`emqlab.explore.parts._back`)."""
    import multiprocessing.util

    worker_init(back)
    sys.unraisablehook = _unraisable
    # a signal the coordinator ignores (under nohup) stays ignored here; a fork server's worker inherits the
    # server's ignoring every one of them, so it asks what the coordinator did (the server's own record)
    server = sys.modules.get("emqlab.explore._forkserver")
    for s in STOP_SIGNALS:
        if s in server.HANDLED if server is not None else signal.getsignal(s) is not signal.SIG_IGN:
            signal.signal(s, _on_sigint)
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is not None:  # (a worker inherits them blocked — _start_forkserver, Dispatch._start — and takes
        mask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # one that came meanwhile only now, in its own handler)
    multiprocessing.util.Finalize(None, _drop_runner, exitpriority=10)
    # (the coordinator, or the fork server, killed with SIGKILL: the part running is interrupted, the cached
    # runner's live keys deleted, and the worker ends)
    exit_with_parent(busy=_running.is_set, clean_up=_drop_runner)


def start_method(live: bool = False) -> str:
    """How a local pool starts its workers: ``fork`` on fakeredis when this process has no other thread (a
    worker is then a copy of it, emqlab already imported, ready in milliseconds; forking a process with
    threads can copy a lock another thread holds, and a live server's connections are better not copied),
    else ``forkserver`` (a clean server process that imports emqlab once and forks the workers from itself;
    about a second to start), else ``spawn``."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and not live and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def default_jobs() -> int:
    """The number of cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


#: the modules every pool worker needs, imported once in the fork server before it forks them
FORKSERVER_PRELOAD = ["emqlab.explore._forkserver", "emqlab.explore.pool", "emqlab.explore.parts",
                      "emqlab.backend.fakeserver", "emqlab.engine.runner", "emqlab.explore.explorer"]


def _start_forkserver() -> None:
    """Start the fork server now (nothing if it runs), its preload :data:`FORKSERVER_PRELOAD`, with the stop
    signals held back, so that it inherits them blocked: a Ctrl-C while it is still importing (before its
    preload ignores them) printed its traceback. Its workers inherit the mask and unblock the signals first
    thing (:func:`_pool_init`). It imports the emqlab this process runs (:func:`_our_sys_path`)."""
    import multiprocessing
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(FORKSERVER_PRELOAD)
    with stops_held(), _our_sys_path():
        forkserver.ensure_running()


@contextmanager
def _our_sys_path() -> Iterator[None]:
    """Within the block, a Python started by this process imports what this process does: multiprocessing
    starts the fork server with ``python -c``, whose ``sys.path`` begins with the current directory, and
    ignores the ``sys.path`` it hands it (CPython 3.10-3.13), so run from a folder holding a folder named
    ``emqlab`` the server imported that one, and its workers failed (ImportError). Here the child gets this
    process's ``sys.path`` as ``PYTHONPATH``, and ``PYTHONSAFEPATH`` (3.11+) keeps the current directory off
    it. (Called from the main thread, before the pool's starter thread runs: the environment is the
    process's.)"""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "PYTHONSAFEPATH")}
    os.environ["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path if isinstance(p, str))
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, with SIGHUP held back, so that it inherits it blocked:
    it ignores SIGINT and SIGTERM itself but not SIGHUP, and a closed terminal signals the whole group
    (the tracker gone, the pool's clean-up prints tracebacks about leaked semaphores)."""
    hup = getattr(signal, "SIGHUP", None)
    if hup is None or threading.current_thread() is not threading.main_thread():
        return
    from multiprocessing import resource_tracker

    with stops_held({hup}):
        resource_tracker.ensure_running()


class InlineExecutor(cf.Executor):
    """Runs each call in this process when it is submitted (``--jobs 1``): the same parts, no pool."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        fut: cf.Future[Any] = cf.Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: B036 - handed to the caller through the future
            if isinstance(e, KeyboardInterrupt):
                raise
            fut.set_exception(e)
        return fut


def _shown(text: str, executor: str) -> str:
    """``text`` with the password of ``executor`` masked, wherever it appears (Dask's messages quote an
    address without its scheme, which :func:`~emqlab.backend.connect._redact`'s URL rule alone misses)."""
    return _redact(text, url_secrets(executor))


def check_executor(executor: str | None) -> None:
    """Raise :class:`ParallelError` for an ``--executor`` that is neither ``local`` nor a Dask address, or a
    Dask address with a user or password in it (Dask has none: a cluster is secured with TLS certificates,
    ``tls://…``); the message masks the password."""
    if executor and executor not in ("local", "process") and not executor.startswith(("dask://", "tcp://",
                                                                                      "tls://")):
        raise ParallelError(_shown(f"unknown executor {executor!r}: use 'local' or dask://host:port", executor))
    if executor and "@" in executor.split("://", 1)[-1].split("/", 1)[0]:
        raise ParallelError(_shown(f"the executor {executor!r} has a user or password: a Dask address has none"
                                   " (dask://host:port; a cluster is secured with TLS certificates, tls://…)",
                                   executor))


def make_executor(jobs: int | None = None, executor: str | None = None, *, pool: bool = False,
                  live: bool = True, back: Any = None) -> tuple[cf.Executor, Callable[[], None]]:
    """An executor and its clean-up: ``executor`` ``dask://host:port`` (or ``tcp://…``) connects a Dask
    client, ``None``/``local`` is a process pool of ``jobs`` workers (this process for one, unless
    ``pool``), started by :func:`start_method` (``live=False``: its workers use fakeredis only)."""
    check_executor(executor)
    if executor and executor not in ("local", "process"):
        try:
            from distributed import Client
        except ImportError:
            raise ParallelError("--executor dask://… needs Dask: pip install 'emqlab[dask]'"
                                " (or pip install 'dask[distributed]')") from None
        address = "tcp://" + executor.split("://", 1)[1] if executor.startswith("dask://") else executor
        try:
            client = Client(address, timeout=10)
        except OSError as e:
            raise ExecutorUnreachable(_shown(f"cannot reach the Dask scheduler at {address}: {e}", executor)) from None
        except (ValueError, TypeError) as e:  # (an address Dask cannot parse)
            raise ParallelError(_shown(f"bad executor address {address!r}: {e}", executor)) from None
        return client.get_executor(), client.close
    n = jobs if jobs is not None else default_jobs()
    if n <= 1 and not pool:
        return InlineExecutor(), lambda: None
    import multiprocessing

    method = start_method(live)
    ctx = multiprocessing.get_context(method)
    _resource_tracker()
    if method == "forkserver":
        # emqlab imported once in the fork server, not in every worker: fakeredis (and numpy under it) alone
        # takes about 0.5 s to import
        _start_forkserver()
    ppe = cf.ProcessPoolExecutor(max_workers=max(1, n), mp_context=ctx, initializer=_pool_init,
                                 initargs=(back,))
    return ppe, lambda: ppe.shutdown(wait=True, cancel_futures=True)


def url_of(conn: Any) -> str | None:
    """The URL a worker process connects to for ``conn``'s server (password included: never print it), or
    None for fakeredis (each worker then has its own)."""
    from emqlab.backend.connect import is_fake

    if is_fake(conn):
        return None
    kw = conn.connection_pool.connection_kwargs
    if "path" in kw:
        return f"unix://{kw['path']}?db={kw.get('db', 0)}"
    auth = ""
    if kw.get("password"):
        user = kw.get("username") or ""
        auth = f"{user}:{kw['password']}@"
    scheme = "rediss" if conn.connection_pool.connection_class.__name__ == "SSLConnection" else "redis"
    return f"{scheme}://{auth}{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


def _executor(executor: str | cf.Executor | None, jobs: int | None) -> tuple[cf.Executor, Callable[[], None]]:
    if isinstance(executor, cf.Executor):
        return executor, lambda: None
    return make_executor(jobs, executor)


#: the longest a wait for the workers holds the stop signals back (s)
WAIT_SLICE = 0.1


def _wait(fs: set[cf.Future[Any]], timeout: float | None) -> tuple[set[cf.Future[Any]], set[cf.Future[Any]]]:
    """``cf.wait(fs, timeout, FIRST_COMPLETED)`` with the stop signals held back (POSIX, main thread): a
    KeyboardInterrupt raised inside it, while it holds some futures' locks, would leave them held, and the
    pool's own thread, cancelling, would then wait for them for ever. Waits at most :data:`WAIT_SLICE` at a
    time, so a signal is taken within that."""
    slice_ = WAIT_SLICE if timeout is None else min(timeout, WAIT_SLICE)
    if threading.current_thread() is not threading.main_thread():
        done, pending = cf.wait(fs, timeout=slice_, return_when=cf.FIRST_COMPLETED)
        return set(done), set(pending)
    with stops_held():  # (a signal that came meanwhile is taken as it ends, outside the locks)
        done, pending = cf.wait(fs, timeout=slice_, return_when=cf.FIRST_COMPLETED)
    return set(done), set(pending)


@contextmanager
def _quiet() -> Iterator[None]:
    """The clean-up after a stop signal, safe from the next one (the terminal sends Ctrl-C to the whole
    process group, and impatient users press it twice): the stop signals are ignored meanwhile
    (:func:`_ignore`; main thread only), so the pool shuts down and every live key is deleted instead of
    hanging half-way."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, _ignore)
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def _interrupt_pool(ex: cf.Executor) -> None:
    """Ctrl-C reaches a terminal's whole process group; a signal to the coordinator alone is passed on, so
    every running part stops and deletes its live keys before the pool shuts down."""
    procs = getattr(ex, "_processes", None) or {}
    for pid in list(procs):
        try:
            os.kill(pid, signal.SIGINT)
        except OSError:
            pass


def stoppable(fn: Callable[..., T], /, *args: Any) -> T:
    """``fn(*args)`` in a pool worker as a task a stop signal interrupts (:func:`_on_sigint` raises
    KeyboardInterrupt inside it), like a part: a worker running a call not marked so counts as between two
    tasks, where a stop signal is ignored, and the call runs to its end while the coordinator's shutdown
    waits for it. None starts once the worker was sent one. (Marked before the check: a signal just before
    the mark is seen by the check, one after it interrupts the call.)"""
    _running.set()
    try:
        if _stopping.is_set():
            raise KeyboardInterrupt
        return fn(*args)
    finally:
        _running.clear()


def run_in_order(fn: Callable[..., T], calls: Sequence[tuple[Any, ...]], jobs: int, *, live: bool,
                 each: Callable[[int, T], None] | None = None) -> list[T]:
    """``fn(*args)`` for every ``args`` of ``calls`` on a local pool of ``jobs`` workers (:func:`make_executor`;
    ``live=False``: they use fakeredis only), each call :func:`stoppable`; the results in the order of
    ``calls``, ``each(i, result)`` called as each comes in that order. A stop signal here (Ctrl-C, or SIGTERM
    or SIGHUP as the CLI's SystemExit) is passed on to the workers (a signal to this process alone reaches
    no worker), whose calls stop and clean up, and the pool is shut down before it is raised again."""
    ex, close = make_executor(jobs, live=live, pool=True)
    try:
        # (held back while the workers start and the calls are queued: submit holds the pool's locks, which a
        # KeyboardInterrupt raised inside it would leave held for the shutdown to wait on; a forked worker
        # unblocks them first thing, _pool_init)
        with stops_held():
            futures = [ex.submit(stoppable, fn, *args) for args in calls]
        results: list[T] = []
        for f in futures:
            while not f.done():
                _wait({f}, None)  # (the signals held back inside, taken between two slices)
            results.append(f.result())
            if each is not None:
                each(len(results) - 1, results[-1])
        return results
    except (KeyboardInterrupt, SystemExit):
        with _quiet():
            _interrupt_pool(ex)
            close()
        raise
    finally:
        close()


#: how often (s) the coordinator, waiting for its workers, looks for the nodes their parts hand on
HEAR_EVERY = 0.005


class Dispatch:
    """The subtrees handed on: queued as they come, sent to the executor's workers as they have room (a
    local pool of ``jobs - 1`` workers, started once the search here has run :data:`WARM_AFTER_S`; any
    other executor at the first hand-on), their own hand-ons queued when they come back, and the parts collected.
    This process is a worker too: once its own search is done it runs queued parts while the others run
    theirs, the newest first (the deepest, so it is soon free to send work on). With one job every part
    runs here. Which parts there are depends on the run counts alone, so the report is the same either way."""

    def __init__(self, job: Job, executor: str | cf.Executor | None, jobs: int | None,
                 progress: Progress | None, root: Runner | None = None) -> None:
        self.job, self.executor, self.progress = job, executor, progress
        #: the root search's runner: a forked worker keeps its copy as its own (fakeredis only)
        self.root = root
        self.prefixes: list[tuple[list[str], Branch | None]] = [([], None)]  # index 0: the search here
        self.order = [a.id for a in job.scenario.actors]
        self._idx = {a: i for i, a in enumerate(self.order)}
        self._queued: list[int] = []
        self._running: dict[cf.Future[Part], int] = {}
        self._done: dict[int, Part] = {}
        self._pool: tuple[cf.Executor, Callable[[], None]] | None = None
        self._starting: threading.Thread | None = None
        self._error: BaseException | None = None
        #: the server refused a worker a queue (:attr:`Part.refused`): nothing more is sent, parts run here
        self.refused: str | None = None
        #: a local pool's channel back (:data:`~emqlab.explore.parts._back`), and per part the hand-ons taken
        #: from it so far
        self._back: Any = None
        self._heard: Counter[int] = Counter()
        #: called with each part's index and the part as it comes in (what it asked for may start new parts)
        self.on_part: Callable[[int, Part], None] | None = None
        #: the search here (part 0) still runs: it may hand on more, and it counts as open
        self._root_open = True
        #: the last (done, total) told to ``progress``
        self._told: tuple[int, int] | None = None
        n = jobs if jobs is not None else default_jobs()
        local = not isinstance(executor, cf.Executor) and executor in (None, "local", "process")
        #: a local pool, started only once the search has run :data:`WARM_AFTER_S` (until then, and if the
        #: search ends sooner, every part handed on runs here); any other executor at the first hand-on
        self._own_pool = local
        self._warm_at = time.perf_counter() + WARM_AFTER_S
        #: every part runs here (one job)
        self.inline = local and n <= 1
        if isinstance(executor, cf.Executor):
            self.workers = max(1, getattr(executor, "_max_workers", 1) or 1)
        else:  # a local pool's (this process is the n-th), or a Dask cluster's, learnt when it is reached
            self.workers = n - 1 if local else 0
        self._tell()  # (0 of 1: the search here, before it hands anything on)

    def rank(self, i: int) -> list[int]:
        pre, branch = self.prefixes[i]
        return [self._idx[c] for c in pre] + ([self._idx[branch.children[0]]] if branch else [])

    def _task(self, i: int) -> Task:
        pre, branch = self.prefixes[i]
        return Task(i, prefix=format_schedule(pre), branch=branch)

    def submit(self, prefix: list[str], branch: Branch) -> None:
        """A node handed on (called by the :class:`~emqlab.explore.parts.Donor` between two runs of the search here)."""
        self.prefixes.append((prefix, branch))
        self._queued.append(len(self.prefixes) - 1)
        self._tell()
        self.pump()

    def root_done(self) -> None:
        """The search here has ended, and what it asked for is handed on."""
        self._root_open = False
        self._tell()

    def _tell(self) -> None:
        """``progress(done, total)``: the parts finished, of the parts known so far (the search here and every
        node handed on). A part counts as finished only once what it handed on is counted too, so done equals
        total only when nothing is left open, and the total grows as parts are handed on: a bar keeps the
        last total it was given (rich ignores None), and one given done == total while a part still runs
        stands full, with no sign of the work left."""
        if not self.progress:
            return
        told = (len(self._done) + (not self._root_open), len(self.prefixes))
        if told != self._told:
            self._told = told
            self.progress(*told)

    def _start(self) -> None:
        if self._pool is not None or self._starting is not None:
            return
        if isinstance(self.executor, cf.Executor):
            self._pool = (self.executor, lambda: None)
            return

        def start() -> None:
            try:
                assert not isinstance(self.executor, cf.Executor)
                live = self.job.url is not None
                if self.executor in (None, "local", "process"):
                    import multiprocessing

                    self._back = multiprocessing.get_context(start_method(live)).SimpleQueue()
                pool = make_executor(self.workers if self.workers else None, self.executor, pool=True,
                                     live=live, back=self._back)
                if not self.workers:  # Dask: the cluster's workers
                    client = getattr(pool[0], "_client", None)
                    info = client.scheduler_info() if client is not None else {}
                    self.workers = max(1, len(info.get("workers", {})))
                for _ in range(self.workers):  # start every worker now and build its runner
                    pool[0].submit(warm_part, self.job)
                self._pool = pool
            except BaseException as e:  # noqa: B036 - raised again in pump()
                self._error = e

        if self.executor in (None, "local", "process") and start_method(self.job.url is not None) == "fork":
            # a fork takes milliseconds, and from this thread it copies a process with no other thread; each
            # worker keeps its copy of the root's runner (its own fakeredis, its own Lua state) instead of
            # building one: no second runner in its memory, none to build
            _local.heir = (self.job.key, self.root) if self.root is not None and is_fake(self.root.conn) else None
            try:
                # (held back while the workers fork: one raised in the fork's own callbacks — logging's
                # lock, run after the fork — is printed and dropped, and the command ran on)
                with stops_held():
                    start()
            finally:
                _local.heir = None
            if self._error is not None:
                raise self._error
            return
        if self.executor in (None, "local", "process"):
            _resource_tracker()  # from this thread, which can hold SIGHUP back (the starter cannot)
            if start_method(self.job.url is not None) == "forkserver":
                _start_forkserver()  # (and set the environment the server starts with: no other thread runs)
        self._starting = threading.Thread(target=start, name="emqlab-pool-start", daemon=True)
        self._starting.start()

    def pump(self, block: bool = False) -> None:
        """Take in what finished (queueing what it handed on) and send what waits to free workers (two in
        flight per worker, so none waits for this process)."""
        if self.inline:
            return
        if self._starting is not None and (block or not self._starting.is_alive()):
            self._starting.join()
            self._starting = None
            if self._error is not None:
                raise self._error
        if self._pool is None:
            if not self._own_pool or time.perf_counter() >= self._warm_at:
                self._start()
            return
        self._hear()
        for f in [f for f in self._running if f.done()]:
            self._take(f)
        ex = self._pool[0]
        while self._queued and self.refused is None and len(self._running) < 2 * self.workers:
            i = self._queued.pop(0)  # the oldest: the shallowest, likely the largest
            self._running[ex.submit(run_part, self.job, self._task(i))] = i

    def _take(self, f: cf.Future[Part]) -> None:
        i = self._running.pop(f, None)
        if i is None:  # (taken already: a part taken in sends new ones, and sending takes in what finished)
            return
        if not f.cancelled():
            self._got(i, f.result())

    def _hear(self, part: int | None = None, count: int = 0) -> None:
        """Queue the nodes the workers' parts have handed on so far (through the channel back); with ``part``,
        wait until that part's ``count`` have come."""
        q = self._back
        while q is not None and (not q.empty() or (part is not None and self._heard[part] < count)):
            i, prefix, branch = q.get()
            self._heard[i] += 1
            self.prefixes.append((parse_schedule(prefix, self.order), branch))
            self._queued.append(len(self.prefixes) - 1)
            self._tell()

    def _got(self, i: int, part: Part) -> None:
        if part.refused is not None:  # back to the queue, to run here
            self.refused = part.refused
            self._queued.append(i)
            return
        if part.streamed:  # every node it handed on is queued before it counts as done
            self._hear(i, part.streamed)
        self._done[i] = part
        for prefix, branch in part.donated:
            self.prefixes.append((parse_schedule(prefix, self.order), branch))
            self._queued.append(len(self.prefixes) - 1)
        if self.on_part is not None:
            self.on_part(i, part)
        self._tell()

    def finish(self) -> list[Part]:
        """Every part handed on, run to the end (or to the job's deadline), in the order they were handed on."""
        deadline = self.job.deadline
        while self._queued or self._running:
            self.pump()
            if self._queued:  # work here too: the newest part (soon done, then back to sending)
                i = self._queued.pop()
                _local.dispatch = self  # its hand-ons come here at once, and it sends work on between runs
                try:
                    part = run_part(self.job, self._task(i))
                finally:
                    _local.dispatch = None
                part.donated = []  # already queued, as they came
                self._got(i, part)
                continue
            if not self._running:
                continue
            timeout = None if deadline is None else max(0.0, deadline - time.time()) + 5.0
            if self._back is not None:  # wake for hand-ons too: take them over while the workers go on
                timeout = HEAR_EVERY if timeout is None else min(timeout, HEAR_EVERY)
            finished, _ = _wait(set(self._running), timeout)
            for f in finished:
                self._take(f)
            if deadline is not None and time.time() > deadline + 5.0 and self._running:
                for f in self._running:
                    f.cancel()
                break
        return [self._done.get(i) or Part(i, complete=False, started=False) for i in range(1, len(self.prefixes))]

    def started(self) -> None:
        """Wait for the pool to have started, if it is starting, and raise what kept it from starting (an
        unreachable Dask scheduler), even when this process ran every part meanwhile."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._error is not None:
            raise self._error

    def interrupt(self) -> None:
        for f in self._running:
            f.cancel()
        if self._pool is not None:
            _interrupt_pool(self._pool[0])

    def close(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._pool is not None:
            self._pool[1]()
            self._pool = None
        if self._back is not None:
            self._back.close()
            self._back = None


__all__ = ["Dispatch", "ExecutorUnreachable", "FORKSERVER_PRELOAD", "InlineExecutor", "ParallelError",
           "check_executor", "default_jobs", "make_executor", "run_in_order", "start_method", "stoppable", "url_of"]
