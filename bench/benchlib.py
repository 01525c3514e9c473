"""What every benchmark here shares: percentiles, a process's RSS and CPU time from /proc, a
baseline HTTP server in its own process, and one line per figure with its baseline and ratio.

Benchmarks measure what production runs: the real process (its RSS, its CPU), with GC on,
against a physical-limit baseline measured in the same run on the same machine.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summary(samples: Sequence[float]) -> dict[str, float]:
    return {"p50": percentile(samples, 50), "p90": percentile(samples, 90), "p99": percentile(samples, 99),
            "max": max(samples), "mean": statistics.fmean(samples)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of process `pid` in MiB: what it holds now, and its peak."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time process `pid` has used so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot (all cores; idle and iowait left out)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    return (sum(ticks) - ticks[3] - ticks[4]) / CLOCK_TICKS


def ratio_line(label: str, value: float, baseline: float, unit: str = "ms", target: float | None = None) -> str:
    ratio = value / baseline if baseline > 0 else float("inf")
    goal = f" (target <= {target:g}x: {'met' if ratio <= target else 'MISSED'})" if target is not None else ""
    return f"  {label:<28} {value:9.2f} {unit}  baseline {baseline:8.2f} {unit}  ratio {ratio:5.2f}x{goal}"


def python_process(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`python -c code args...` with this interpreter and environment (PYTHONPATH included, so a
    benchmark of another checkout measures that checkout's code in every process)."""
    return subprocess.Popen([sys.executable, "-c", code, *args], env={**os.environ, **(env or {})})


def wait_for_http(url: str, timeout: float = 600.0, proc: subprocess.Popen[bytes] | None = None) -> float:
    """Seconds until `url` answers 200 (raises on timeout or when `proc` dies first)."""
    import urllib.error
    import urllib.request

    started = time.monotonic()
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return time.monotonic() - started
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{url} not ready after {timeout:.0f}s")
        time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
