"""`hami-dcu demo --keep`: the demo cluster stays up for kubectl and `kubectl hami-dcu status`,
and Ctrl-C stops it cleanly."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ctrl_c import interruptible

from e2e.tools import helm_and_kubectl

BIN = Path(sys.executable).parent


def test_kept_demo_answers_kubectl_and_status_then_stops_on_ctrl_c():
    tools = helm_and_kubectl()
    if tools is None:
        pytest.skip("kubectl not available")
    kubectl = str(tools[1])
    demo = subprocess.Popen([str(BIN / "hami-dcu"), "demo", "--keep"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    try:
        kubeconfig = None
        for line in demo.stdout:
            if line.strip().startswith("export KUBECONFIG="):
                kubeconfig = line.strip().partition("=")[2]
            if line.strip().startswith("hami-dcu status"):
                break  # the last line of the instructions
        assert kubeconfig, "the demo printed no kubeconfig"
        env = {**os.environ, "KUBECONFIG": kubeconfig, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}

        def run(*args: str) -> str:
            done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            return done.stdout

        pods = {line.split()[0]: line.split() for line in run(kubectl, "get", "pods", "-n", "demo").splitlines()[1:]}
        assert pods["train-15pct"][1:3] == ["1/1", "Running"] and pods["too-big"][2] == "Pending"
        assert [line.split()[1] for line in run(kubectl, "get", "nodes").splitlines()[1:]] == ["Ready", "Ready"]
        assert "70000 MiB" in run(kubectl, "describe", "pod", "too-big", "-n", "demo")
        status = run(kubectl, "hami-dcu", "status")
        assert "demo/train-15pct/main (2000 MiB, 15%)" in status
        assert "cluster: 2 nodes, 4 cards (4 healthy)" in status and "6 pods" in status
        demo.send_signal(signal.SIGINT)
        rest, stderr = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 0 and "Traceback" not in stderr
    assert rest.rstrip().endswith("local cluster stopped")
