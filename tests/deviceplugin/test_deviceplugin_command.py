"""`hami-dcu device-plugin` as the chart runs it in mock mode: fake tree, registration, node annotation."""

import subprocess
import sys
import time

import yaml
from conftest import CARDS

from hami_dcu.common import keys
from hami_dcu.e2e.kubelet import LocalKubelet, short_socket_dir


def test_mock_mode_command_registers_and_publishes(api_server, kube, tmp_path):
    plugin_dir = short_socket_dir("cmd-")
    kubelet = LocalKubelet(kube, "w1", plugin_dir).start()
    mock = tmp_path / "w1.yaml"
    mock.write_text(yaml.safe_dump(CARDS))
    fake = tmp_path / "fake"
    process = subprocess.Popen(
        [sys.executable, "-m", "hami_dcu.cli.main", "device-plugin", "--kubeconfig", str(api_server.kubeconfig_path),
         "--node-name", "w1", "--smi", "mock", "--mock-devices", str(mock), "--mock-fake-tree",
         "--dev-root", str(fake / "dev"), "--sys-root", str(fake / "sys"), "--plugin-dir", str(plugin_dir),
         "--vdev-dir", str(tmp_path / "vgpu"), "--etc-vdev", str(tmp_path / "etc"), "--register-interval", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            annotations = kube.get_node("w1")["metadata"].get("annotations") or {}
            capacity = (kube.get_node("w1").get("status") or {}).get("capacity") or {}
            if keys.NODE_REGISTER in annotations and capacity.get(keys.DEFAULT_COUNT_RESOURCE) == "8":
                break
            assert process.poll() is None, process.stdout.read().decode()
            time.sleep(0.1)
        else:
            raise AssertionError("the plugin did not register within 20 s")
        assert annotations[keys.NODE_REGISTER].startswith("DCU-S1,4,65520,100,DCU-K100_AI,0,true,0,hami:")
        assert (fake / "dev" / "dri" / "renderD129").exists() and kubelet.registrations == 1
    finally:
        process.terminate()
        process.wait(10)
        kubelet.stop()


def test_sigterm_stops_the_plugin_and_removes_its_socket(api_server, kube, tmp_path):
    plugin_dir = short_socket_dir("term-")
    kubelet = LocalKubelet(kube, "w2", plugin_dir).start()
    mock = tmp_path / "w2.yaml"
    mock.write_text(yaml.safe_dump(CARDS))
    process = subprocess.Popen(
        [sys.executable, "-m", "hami_dcu.cli.main", "device-plugin", "--kubeconfig", str(api_server.kubeconfig_path),
         "--node-name", "w2", "--smi", "mock", "--mock-devices", str(mock), "--mock-fake-tree",
         "--dev-root", str(tmp_path / "dev"), "--sys-root", str(tmp_path / "sys"), "--plugin-dir", str(plugin_dir),
         "--vdev-dir", str(tmp_path / "vgpu"), "--etc-vdev", str(tmp_path / "etc")])
    try:
        socket_file = plugin_dir / "hygon.com_dcunum.sock"
        deadline = time.monotonic() + 20
        while not (socket_file.exists() and kubelet.registrations):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.1)
        process.terminate()
        assert process.wait(10) == 0
        assert not socket_file.exists()
    finally:
        if process.poll() is None:
            process.kill()
        kubelet.stop()
