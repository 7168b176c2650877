"""The one home of the texts emqlab answers with where a Redis server would, and of the texts of its own
that stop a script: both Lua environments (the client-side host and the embedded server, through
``lua/lib/sandbox.lua``, which gets them from :func:`lua_table`), the host's command rules, the embedded
server and the engine's Python blocks read them from here, and ``tests/test_messages.py`` finds no copy of
one anywhere else.

Three groups, by source:

* **Redis 7.0's error replies** that emqlab reproduces (Redis 7.0's ``src/script_lua.c``, ``src/eval.c``,
  ``src/script.c``, ``src/server.c``, ``src/multi.c``; checked against a Redis 7.0 server by
  ``tests/test_host_differential.py`` and ``tests/test_lua_sandbox_probes.py``);
* **Lua 5.1's own library messages** for the functions the sandbox re-implements (``lbaselib.c``,
  ``lmathlib.c``, ``ldo.c``);
* **emqlab's own** texts, where emqlab stops what Redis would stop another way (instruction, CPU and command limits in
  place of Redis's time limit, a capped Lua heap, Ctrl-C) or does not model (RESP3 inside a script).

A text holding ``%s`` or ``%d`` is a format (Lua's ``string.format``, Python's ``%``). The Lua versions of
the three libraries Redis bundles (``lua/lib/cjson.lua``, ``cmsgpack.lua``, ``bit.lua``) keep their
libraries' own texts, as each of those libraries does in Redis.
"""

from __future__ import annotations

# -- Redis 7.0: the scripting API and the sandbox (src/script_lua.c, src/eval.c) --------------------------
#: assigning to a global or to a field of a library table
READONLY_TABLE = "Attempt to modify a readonly table"
#: reading a global no one defined (``%s``: its name)
NONEXISTENT_GLOBAL = "Script attempted to access nonexistent global variable '%s'"
#: ``redis.error_reply`` / ``redis.status_reply`` without exactly one string
REPLY_HELPER_ARGUMENTS = "ERR wrong number or type of arguments"
#: ``redis.sha1hex`` and ``math.random`` with the wrong number of arguments
WRONG_NUMBER_OF_ARGUMENTS = "wrong number of arguments"
#: ``redis.log`` with fewer than two arguments
LOG_ARGUMENTS = "redis.log() requires two arguments or more."
#: ``redis.log`` whose level is not a number
LOG_LEVEL_TYPE = "First argument must be a number (log level)."
#: ``redis.log`` whose level is none of LOG_DEBUG … LOG_WARNING
LOG_LEVEL = "Invalid debug level."
#: ``redis.set_repl`` without exactly one argument (Redis's text says two)
SET_REPL_ARGUMENTS = "redis.set_repl() requires two arguments."
#: ``redis.set_repl`` with a flag that is none of the four
SET_REPL_FLAGS = "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."
#: ``redis.call`` / ``redis.pcall`` / ``redis.acl_check_cmd`` without arguments
NO_ARGUMENTS = "Please specify at least one argument for this redis lib call"
#: an argument of those that is neither a string nor a number
ARGUMENT_TYPE = "Lua redis lib command arguments must be strings or integers"
#: ``redis.acl_check_cmd`` naming no command
ACL_CHECK_COMMAND = "Invalid command passed to redis.acl_check_cmd()"
#: ``redis.setresp`` without exactly one argument
SETRESP_ARGUMENTS = "redis.setresp() requires one argument."
#: ``redis.setresp`` with a version other than 2 or 3
SETRESP_VERSION = "RESP version must be 2 or 3."
#: a script's result nested deeper than Redis converts
STACK_LIMIT = "ERR reached lua stack limit"

# -- Redis 7.0: a command a script sends (src/script.c) ----------------------------------------------------
#: a command name (or container subcommand) the command table does not know
UNKNOWN_COMMAND = "ERR Unknown Redis command called from script"
#: a command whose argument count does not fit its arity
SCRIPT_ARITY = "ERR Wrong number of args calling Redis command from script"
#: a command flagged ``noscript`` (EVAL, MULTI, SUBSCRIBE, …)
NOSCRIPT_COMMAND = "ERR This Redis command is not allowed from script"
#: a write from a script declared ``no-writes``
WRITE_IN_READONLY_SCRIPT = "ERR Write commands are not allowed from read-only scripts."
#: EVAL_RO / EVALSHA_RO of a script whose shebang does not say ``flags=no-writes``
RO_CALL_OF_WRITING_SCRIPT = "ERR Can not execute a script with write flag using *_ro command."
#: a command without the ``stale`` flag in an ``allow-stale`` script, on a replica whose link to its master is
#: down while ``replica-serve-stale-data`` is ``no`` (src/script.c, scriptVerifyAllowStale)
STALE_REPLICA_COMMAND = "ERR Can not execute the command on a stale replica"
#: XREAD / XREADGROUP with BLOCK inside a script (``%s``: the command as the script spelled it)
BLOCKING_STREAM_READ = "%s command is not allowed with BLOCK option from scripts"
#: a blocking list or zset command's timeout that is no number (src/timeout.c)
TIMEOUT_NOT_FLOAT = "ERR timeout is not a float or out of range"
#: a negative timeout (src/timeout.c)
TIMEOUT_NEGATIVE = "ERR timeout is negative"
#: WAIT's timeout that is no integer (src/timeout.c, in milliseconds)
TIMEOUT_NOT_INTEGER = "ERR timeout is not an integer or out of range"

# -- Valkey 8+: where its texts differ from Redis 7.0's (the host follows them for a Valkey server:
# emqlab.scripting.dialect; each replaces the Redis text named after VALKEY_) ---------------------------------
VALKEY_UNKNOWN_COMMAND = "ERR Unknown command called from script"
VALKEY_SCRIPT_ARITY = "ERR Wrong number of args calling command from script"
VALKEY_NOSCRIPT_COMMAND = "ERR This Valkey command is not allowed from script"
VALKEY_NO_ARGUMENTS = "Please specify at least one argument for this call"
VALKEY_ARGUMENT_TYPE = "Command arguments must be strings or integers"
VALKEY_ACL_CHECK_COMMAND = "Invalid command passed to server.acl_check_cmd()"
VALKEY_SETRESP_ARGUMENTS = "server.setresp() requires one argument."
VALKEY_LOG_ARGUMENTS = "server.log() requires two arguments or more."
VALKEY_LOG_LEVEL = "Invalid log level."
VALKEY_SET_REPL_ARGUMENTS = "server.set_repl() requires one argument."
#: a ``#!`` line naming an engine Valkey does not have (``%s``: the name after ``#!``); Redis 7.0 says
#: ``Unexpected engine in script shebang: #!<name>``
VALKEY_SHEBANG_ENGINE = "Could not find scripting engine '%s'"

# -- Redis 7.0: replies outside scripts (src/server.c, src/multi.c, src/object.c) -------------------------
#: EVALSHA of a script the server's cache does not hold
NOSCRIPT = "NOSCRIPT No matching script. Please use EVAL."
#: a command whose options do not parse
SYNTAX_ERROR = "ERR syntax error"
#: an argument that must be an integer
NOT_AN_INTEGER = "ERR value is not an integer or out of range"
#: MULTI inside MULTI
MULTI_NESTED = "ERR MULTI calls can not be nested"
#: EXEC / DISCARD outside MULTI
EXEC_WITHOUT_MULTI = "ERR EXEC without MULTI"
DISCARD_WITHOUT_MULTI = "ERR DISCARD without MULTI"

# -- Redis 7.0: a script that runs long (src/script.c: scriptInterrupt, scriptKill) ------------------------
#: any command but SCRIPT KILL while a script has run past the busy-reply threshold, as the embedded server
#: says it: Redis's text names SHUTDOWN NOSAVE too ("… SCRIPT KILL or SHUTDOWN NOSAVE."), which the embedded
#: server does not answer (``emqlab server`` stops at Ctrl-C / SIGTERM)
BUSY_SCRIPT = "BUSY Redis is busy running a script. You can only call SCRIPT KILL."
#: the same while a function runs (FCALL): only FUNCTION KILL
BUSY_FUNCTION = "BUSY Redis is busy running a script. You can only call FUNCTION KILL."
#: SCRIPT KILL / FUNCTION KILL with no script running
NOTBUSY = "NOTBUSY No scripts in execution right now."
#: SCRIPT KILL / FUNCTION KILL of a script that has called a write command
UNKILLABLE = ("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either "
              "wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.")
#: the reply to the script a KILL ended: its SHA1 (the function's name), ``user_script`` or ``user_function``,
#: the line it was running
SCRIPT_KILLED = "ERR Script killed by user with SCRIPT KILL... script: %s, on @%s:%d."

# -- Lua 5.1's library, as the sandbox's own versions of its functions say it ------------------------------
#: a coroutine that yields from inside a metamethod or a C function (ldo.c)
YIELD_BOUNDARY = "attempt to yield across metamethod/C-call boundary"
#: calling what is no function (``%s``: its type; ldebug.c)
CALL_NON_FUNCTION = "attempt to call a %s value"
#: a library function's bad argument: its position, the function's name, what is wrong (lauxlib.c)
BAD_ARGUMENT = "bad argument #%d to '%s' (%s)"
#: what is wrong with an argument of the wrong type: the type wanted, the type given (lauxlib.c)
TYPE_EXPECTED = "%s expected, got %s"
#: what is wrong with an argument that is no coroutine, no Lua function (lbaselib.c)
EXPECTED = "%s expected"
#: what is wrong with ``math.random(m, n)`` for ``m > n``, or ``math.random(0)`` (lmathlib.c)
INTERVAL_EMPTY = "interval is empty"
#: ``load`` whose reader returned no string (lbaselib.c)
READER_RESULT = "reader function must return a string"

# -- emqlab's own -----------------------------------------------------------------------------------------
#: what starts an error the client-side host raises where Redis would not
HOST_ERROR = "ERR emqlab host: "
#: what starts an error the embedded server raises where Redis would not
SERVER_ERROR = "ERR emqlab server: "
#: a script stopped by Ctrl-C (after HOST_ERROR or SERVER_ERROR)
INTERRUPTED = "interrupted (KeyboardInterrupt)"
#: a script stopped by the instruction budget of one run (after HOST_ERROR or SERVER_ERROR): the budget,
#: the setting that changes it
BUDGET_SPENT = "the script ran more than %d Lua instructions in one run (an endless loop?); %s sets the budget"
#: a script stopped by its limit of CPU seconds in one run (after HOST_ERROR or SERVER_ERROR): the limit, the
#: setting (Redis has a time limit too, ``busy-reply-threshold``, past which only SCRIPT KILL stops a script)
TOO_LONG = "the script ran more than %g s of CPU in one run (an endless loop?); %s sets the limit"
#: ``redis.register_function`` called outside a library's load (Redis 7.0's text)
REGISTER_OUTSIDE_LOAD = "redis.register_function can only be called on FUNCTION LOAD command"
#: ``redis.register_function`` given arguments it cannot take: what was wrong (Redis 7.0 has one text for each)
REGISTER_BAD_ARGUMENTS = "redis.register_function takes (name, callback) or {function_name=, callback=, flags=}: %s"
#: a function flag ``redis.register_function`` does not know (Redis 7.0's text)
REGISTER_UNKNOWN_FLAG = "unknown flag given"
#: a library's code that calls ``redis.register_function`` twice with one name (Redis 7.0's text)
REGISTER_DUPLICATE = "Function already exists in the library"
#: a library given as Lua bytecode (FUNCTION LOAD; EVAL refuses it as a text that does not compile)
LIBRARY_BYTECODE = "a library is Lua source text; Lua bytecode is refused"
#: a pattern match refused before it runs: the function, the subject's length, the bound on its
#: matcher's steps, the limit (Lua's matcher backtracks inside one C call, where no limit can stop it)
PATTERN_TOO_COSTLY = ("emqlab: string.%s of this pattern on %d bytes could take %.3g matcher steps (each "
                      "repetition like '.-' or '%%d*' multiplies them); the limit is %.3g")
#: a script the host runs stopped by its cap on commands in one run (after HOST_ERROR): the cap, the setting
TOO_MANY_COMMANDS = "the script sent more than %d commands in one run (an endless loop?); %s sets the cap"
#: scripts that ran out of their capped Lua heap (after HOST_ERROR or SERVER_ERROR): whose scripts, the
#: setting that caps it, the cap (bytes)
OUT_OF_MEMORY = "not enough memory (the Lua heap of %s scripts is capped at %s, %d bytes)"
#: ``redis.setresp(3)`` on the host, which speaks RESP2 only
SETRESP3_NOT_MODELLED = "emqlab host: redis.setresp(3) is not modelled (the host speaks RESP2)"
#: resuming a script run the host has already released
RUN_RELEASED = "emqlab host: this script run was released"
#: a command of a script emqlab runs that reaches beyond the run's keys (``%s``: the run's prefix, then what
#: the command reached: a key, every key, another database or server); the code is Redis's for an ACL refusal
OUTSIDE_RUN = "NOPERM emqlab runs a script on its run's keys only (%s*): the script's %s"
#: an optimistic transaction (WATCH … EXEC) of a Python block that kept losing (``%d``: its attempts); without
#: the ``ERR`` code, as redis-py gives a server's error (an outcome shows it as ``ERR …``)
TRANSACTION_ABORTED = "transaction aborted %d times: a watched key kept changing"


def texts() -> dict[str, str]:
    """Every text of this module by its name (``{"NOSCRIPT": "NOSCRIPT No matching …", …}``)."""
    return {k: v for k, v in globals().items() if k.isupper() and isinstance(v, str)}


def lua_table() -> dict[bytes, bytes]:
    """The texts as ``lua/lib/sandbox.lua`` reads them (its ``msg`` option): names in lower case, as bytes."""
    return {k.lower().encode(): v.encode() for k, v in texts().items()}


__all__ = ["lua_table", "texts"]
