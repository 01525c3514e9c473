"""One line on stderr and a non-zero exit for the mistakes people make, never a traceback.

Exit codes, the same for every subcommand:
  0    done (servers: stopped by SIGTERM or Ctrl-C)
  1    failed while running (API server unreachable or refusing, an unexpected error)
  2    could not start: bad flags, kubeconfig, a port in use, an unusable directory or file
  130  interrupted (Ctrl-C) before finishing
  141  output closed early (`hami-dcu demo | head -1`), as a shell reports SIGPIPE

Any other failure hami-dcu expects (a HamiDcuError) is its message and exit 1. An unexpected
exception, a bug, is also one line, naming its type; `--log-level debug` shows the
traceback for a bug report.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Callable

from hami_dcu.common.io.cannotstart import CannotStart
from hami_dcu.common.io.kube import KubeConfigError, KubeError
from hami_dcu.common.protocol.errors import HamiDcuError

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


def say(prog: str, message: str) -> None:
    """`<prog>: <message>` on one line of stderr."""
    text = " ".join(str(message).split())  # a multi-line message from a library becomes one line
    try:
        print(f"{prog}: {text}", file=sys.stderr, flush=True)
    except (BrokenPipeError, ValueError):
        pass  # stderr is gone too: the exit code is all that is left


def os_error_message(exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"cannot listen on {_address(exc)}: address already in use (another process holds the port)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {_address(exc)}: address not available on this machine"
    if exc.errno in (errno.EACCES, errno.EPERM) and exc.filename is None:
        return f"permission denied ({_without_errno(exc)}); ports below 1024 need privileges"
    if exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return _without_errno(exc)


def _address(exc: OSError) -> str:
    """HOST:PORT out of asyncio's "error while attempting to bind on address ('h', p): ..."."""
    found = re.search(r"\('([^']*)', (\d+)", str(exc))
    return f"{found.group(1)}:{found.group(2)}" if found else _without_errno(exc)


def _without_errno(exc: OSError) -> str:
    text = str(exc)
    return text.split("] ", 1)[1] if text.startswith("[Errno") and "] " in text else text


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush does
    not print 'Exception ignored ... BrokenPipeError'."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def run_reporting(prog: str, run: Callable[[], int], debug: bool = False) -> int:
    """Run a subcommand; turn what escapes it into one line and an exit code."""
    try:
        code = int(run() or 0)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _silence_stdout()
        say(prog, "output closed before the end (broken pipe)")
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        say(prog, "interrupted")
        return EXIT_INTERRUPTED
    except (KubeConfigError, CannotStart) as exc:
        say(prog, str(exc))
        return EXIT_USAGE
    except KubeError as exc:
        say(prog, f"Kubernetes API: {exc}")
        return EXIT_FAILED
    except OSError as exc:
        say(prog, os_error_message(exc))
        return EXIT_USAGE
    except HamiDcuError as exc:  # any other failure we expect (common/protocol/errors.py): said as it is
        say(prog, str(exc))
        return EXIT_FAILED
    except Exception as exc:
        if debug:
            raise
        say(prog, f"unexpected {type(exc).__name__}: {exc} (rerun with --log-level debug for the traceback)")
        return EXIT_FAILED
