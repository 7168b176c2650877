"""Imported first in the fork server of a local pool (emqlab.parallel.FORKSERVER_PRELOAD): the server
ignores Ctrl-C, which the terminal sends to the whole process group, so an interrupt while it imports
emqlab prints no traceback of its own. Its workers set their own handler (emqlab.parallel._pool_init);
the coordinator stops them and the server."""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
