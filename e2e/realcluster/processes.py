"""Child processes of the real-cluster suite: started in their own session, logged to a file,
stopped with SIGTERM then SIGKILL, and reported with the tail of their log when they die."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path


class Process:
    def __init__(self, name: str, argv: Sequence[str], log: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.env = env
        self.cwd = cwd
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        # Killed with the thread that started it, so a test run that is itself killed (CI
        # timeout, Ctrl-C twice) leaves no apiserver or plugin behind. Start processes only
        # from threads that live as long as the cluster.
        argv = ["setpriv", "--pdeathsig", "KILL", "--", *self.argv]
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, cwd=self.cwd, start_new_session=True,
            )
        return self

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def exit_code(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.popen.returncode}; last log lines:\n{self.tail()}")

    def signal(self, sig: int) -> None:
        if self.running:
            assert self.popen is not None
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM to the whole process group, SIGKILL after `grace` seconds."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.popen.wait(10)
        return self.popen.returncode

    def kill(self) -> None:
        """Die at once, as a crashed or OOM-killed process does."""
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(10)


def wait_for(what: str, check: Callable[[], object], timeout: float, processes: Sequence[Process] = (),
             interval: float = 0.2) -> None:
    """Poll `check()` until true; fail early, with its log, if a process we wait on dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in processes:
            process.check_alive()
        try:
            if check():
                return
        except Exception:  # not up yet: connection refused, 503, ...
            pass
        time.sleep(interval)
    tails = "\n".join(f"--- {p.name}:\n{p.tail()}" for p in processes)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")
