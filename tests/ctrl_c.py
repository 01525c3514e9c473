"""For tests that press Ctrl-C on a child process."""

import signal


def interruptible() -> None:
    """In the child, before exec: SIGINT as at a terminal. A shell without job control starts
    background commands (CI's, often) with SIGINT ignored, and Python then installs no
    Ctrl-C handler: a SIGINT the test sends would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
