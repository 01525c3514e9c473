"""A cold build of the upstream binaries says what it builds, about how long it takes and that
it is still at it, as it goes, and that reaches the terminal under pytest (issue 23: the first
`pytest -q` on a new machine was silent for ~20 minutes). Driven with a stand-in `go` that
"builds" in two seconds, so the real build.sh runs every line but the compiler."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from e2e.realcluster import upstream
from e2e.tools import ROOT

FAKE_GO = """#!/bin/sh
case "$1" in
  list) echo v9.9.9 ;;
  build)
    out=
    while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
    sleep 2
    case "$out" in
      */) for b in kube-apiserver kube-controller-manager kube-scheduler; do
            printf '#!/bin/sh\\n' > "$out$b"; chmod +x "$out$b"; done ;;
      *) printf '#!/bin/sh\\n' > "$out"; chmod +x "$out" ;;
    esac ;;
esac
"""


def fake_env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "go").write_text(FAKE_GO)
    (bin_dir / "go").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "HAMI_DCU_UPSTREAM_BIN"}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "HAMI_DCU_CACHE": str(tmp_path / "cache"),
            "HAMI_DCU_BUILD_HEARTBEAT": "1"}


def test_a_cold_build_says_what_it_builds_and_a_warm_one_says_nothing(tmp_path):
    env = fake_env(tmp_path)
    cold = subprocess.run(["bash", str(upstream.BUILD_SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert cold.returncode == 0, cold.stderr
    out = tmp_path / "cache" / "upstream" / "k8s-v9.9.9-etcd-v9.9.9"
    assert cold.stdout == f"{out}\n"
    said = cold.stderr.splitlines()
    assert said[0].startswith("upstream build: etcd v9.9.9 and Kubernetes v9.9.9 are not built yet")
    assert "10-20 minutes cold" in said[0]
    assert "upstream build: building etcd v9.9.9 (cold, on 2 cores: about 3-5 minutes" in cold.stderr
    assert any(line.startswith("upstream build: still building etcd v9.9.9 (0m0") for line in said), said
    assert any(line.startswith("upstream build: built kube-apiserver, kube-controller-manager, kube-scheduler")
               for line in said), said
    assert said[-1].startswith("upstream build: done in 0m0") and said[-1].endswith(f"later runs reuse {out}")
    warm = subprocess.run(["bash", str(upstream.BUILD_SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert (warm.returncode, warm.stdout, warm.stderr) == (0, f"{out}\n", "")


def test_binaries_passes_each_line_on_as_it_comes(tmp_path, monkeypatch):
    for key, value in fake_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("HAMI_DCU_UPSTREAM_BIN", raising=False)
    heard: list[tuple[float, str]] = []
    monkeypatch.setattr(upstream, "announce", lambda line: heard.append((time.monotonic(), line)))
    directory = upstream.binaries()
    finished = time.monotonic()
    assert directory == tmp_path / "cache" / "upstream" / "k8s-v9.9.9-etcd-v9.9.9"
    first_at, first = heard[0]
    assert "not built yet" in first and finished - first_at > 3  # heard while building, not at the end


def test_under_pytest_the_lines_reach_the_terminal_past_output_capture(tmp_path):
    (tmp_path / "test_cold.py").write_text(textwrap.dedent("""
        from e2e.realcluster import upstream

        def test_cold_build():
            assert upstream.binaries().name == "k8s-v9.9.9-etcd-v9.9.9"
    """))
    # The harness is not installed: the child pytest, run outside the checkout, finds it by path.
    env = {**fake_env(tmp_path), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "e2e.conftest",
               str(tmp_path / "test_cold.py")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "upstream build: building etcd v9.9.9" in done.stdout  # no -s: capture is on
    assert "upstream build: done in" in done.stdout
