"""Imported first in the fork server of a local pool (emqlab.explore.pool.FORKSERVER_PRELOAD): the server
ignores Ctrl-C, which the terminal sends to the whole process group, so an interrupt while it imports
emqlab prints no traceback of its own. Its workers set their own handler (emqlab.explore.pool._pool_init);
the coordinator stops them and the server."""

import signal

from emqlab.explore.stops import STOP_SIGNALS

# (SIGTERM and SIGHUP too: a CI timeout or a closed terminal signals the whole group; the server ends when
# the coordinator, its parent, closes its end of the server's pipe)
for _sig in STOP_SIGNALS:
    signal.signal(_sig, signal.SIG_IGN)
