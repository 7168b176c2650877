"""Imported first in the fork server of a local pool (emqlab.explore.pool.FORKSERVER_PRELOAD): the server
ignores Ctrl-C, which the terminal sends to the whole process group, so an interrupt while it imports
emqlab prints no traceback of its own. Its workers set their own handler (emqlab.explore.pool._pool_init);
the coordinator stops them and the server."""

import signal

from emqlab.explore.stops import STOP_SIGNALS, exit_with_parent

#: the stop signals the coordinator did not ignore (under nohup it ignores SIGHUP): the server's workers, which
#: inherit the server's ignoring them, handle these (emqlab.explore.pool._pool_init)
HANDLED = frozenset(s for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN)

# (SIGTERM and SIGHUP too: a CI timeout or a closed terminal signals the whole group; the server ends when
# the coordinator, its parent, closes its end of the server's pipe)
for _sig in STOP_SIGNALS:
    signal.signal(_sig, signal.SIG_IGN)

# ... and when the coordinator is killed (SIGKILL closes the pipe too, but the server's workers, its
# children, would live on): the server ends, and each worker sees its parent gone (emqlab.explore.pool._pool_init)
exit_with_parent(grace_s=0.0)
