"""`hami-dcu device-plugin` as the chart runs it in mock mode: fake tree, registration, node annotation."""

import subprocess
import sys
import time
import urllib.request

import yaml
from dp_helpers import CARDS

from hami_dcu.cli.localcluster.kubelet import LocalKubelet, short_socket_dir
from hami_dcu.cli.main import build_parser
from hami_dcu.common.io.metricsserver import serve
from hami_dcu.common.protocol import keys
from hami_dcu.deviceplugin import command
from hami_dcu.node.smi import FALLBACK_MODEL

DCU = keys.DCU_NAMING  # the naming set these tests speak


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
         "--vdev-dir", str(tmp_path / "vgpu"), "--etc-vdev", str(tmp_path / "etc"), "--register-interval", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            annotations = kube.get_node("w1")["metadata"].get("annotations") or {}
            capacity = (kube.get_node("w1").get("status") or {}).get("capacity") or {}
            if DCU.node_register in annotations and capacity.get(DCU.resources.count) == "8":
                break
            assert process.poll() is None, process.stdout.read().decode()
            time.sleep(0.1)
        else:
            raise AssertionError("the plugin did not register within 20 s")
        assert annotations[DCU.node_register].startswith("DCU-S1,4,65520,100,DCU-K100_AI,0,true,0,hami:")
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


def parse(*argv):
    parser, _ = build_parser()
    return parser.parse_args(["device-plugin", *argv])


def test_health_change_republishes_the_node_at_once(kube, tmp_path):
    kube.create_node({"metadata": {"name": "w3"}})
    mock = tmp_path / "w3.yaml"
    mock.write_text(yaml.safe_dump(CARDS))
    args = parse("--node-name", "w3", "--smi", "mock", "--mock-devices", str(mock), "--mock-fake-tree",
                 "--dev-root", str(tmp_path / "dev"), "--sys-root", str(tmp_path / "sys"),
                 "--plugin-dir", str(tmp_path / "plugins"), "--vdev-dir", str(tmp_path / "vgpu"),
                 "--etc-vdev", str(tmp_path / "etc"), "--register-interval", "3600")
    core, server, loop = command.build(args, kube)
    server.refresh_health()
    assert loop.once()
    register = lambda: kube.get_node("w3")["metadata"]["annotations"][DCU.node_register]  # noqa: E731
    assert ",true,1,hami:" in register()
    (tmp_path / "dev" / "dri" / "card1").unlink()  # card S2's device node vanished
    assert server.refresh_health()  # the watcher thread does this every second
    assert register().endswith("DCU-S2,4,65520,100,DCU-K100_AI,0,false,1,hami:")
    assert core.metrics.value("hami_dcu_plugin_card_healthy", node="w3", card="DCU-S2") == 0


def test_a_plugin_built_with_hcu_registers_advertises_and_names_cards_in_the_hcu_set(kube, tmp_path):
    kube.create_node({"metadata": {"name": "w5"}})
    mock = tmp_path / "w5.yaml"
    mock.write_text(yaml.safe_dump(CARDS))
    args = parse("--node-name", "w5", "--smi", "mock", "--mock-devices", str(mock), "--mock-fake-tree",
                 "--dev-root", str(tmp_path / "dev"), "--sys-root", str(tmp_path / "sys"),
                 "--plugin-dir", str(tmp_path / "plugins"), "--vdev-dir", str(tmp_path / "vgpu"),
                 "--etc-vdev", str(tmp_path / "etc"), "--naming", "hcu")
    plugin, server, loop = command.build(args, kube)
    core = plugin.core
    hcu = keys.HCU_NAMING
    assert core.naming is hcu and sorted(core.cards) == ["HCU-S1", "HCU-S2"]
    assert server.resource == core.resource == hcu.resources.count and core.names == hcu.resources
    server.refresh_health()
    assert loop.once()
    annotations = kube.get_node("w5")["metadata"]["annotations"]
    assert annotations[hcu.node_register].startswith("HCU-S1,4,65520,100,HCU-K100_AI,")
    assert annotations[hcu.node_handshake].startswith(keys.HANDSHAKE_REPORTED)
    assert not DCU.node_keys & set(annotations)


def test_unknown_model_is_an_event_and_a_metric_served_over_http(kube, tmp_path):
    kube.create_node({"metadata": {"name": "w4"}})
    mock = tmp_path / "w4.yaml"
    mock.write_text(yaml.safe_dump([dict(CARDS[0], model=FALLBACK_MODEL, compute_units=60)]))
    args = parse("--node-name", "w4", "--smi", "mock", "--mock-devices", str(mock), "--mock-fake-tree",
                 "--dev-root", str(tmp_path / "dev"), "--sys-root", str(tmp_path / "sys"),
                 "--plugin-dir", str(tmp_path / "plugins"), "--vdev-dir", str(tmp_path / "vgpu"),
                 "--etc-vdev", str(tmp_path / "etc"))
    core, _, _ = command.build(args, kube)
    command.report_unknown_models(core)
    events = kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    (event,) = [e for e in events if e["reason"] == "UnknownDCUModel"]
    assert "DCU-S1 (0000:3D:00.0)" in event["message"] and event["involvedObject"]["name"] == "w4"
    server = serve(core.metrics, "127.0.0.1:0")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        assert 'hami_dcu_plugin_unknown_model_cards{node="w4"} 1.0' in text
    finally:
        server.shutdown()
        server.server_close()


def test_the_pod_resources_socket_flag_reaches_the_volcano_gang_path(kube, tmp_path):
    # Which pod a gang's Allocate serves is asked of the kubelet on the socket the flag names.
    kube.create_node({"metadata": {"name": "w5"}})
    mock = tmp_path / "w5.yaml"
    mock.write_text(yaml.safe_dump(CARDS))
    socket = str(tmp_path / "pod-resources" / "kubelet.sock")
    args = parse("--node-name", "w5", "--smi", "mock", "--mock-devices", str(mock), "--mock-fake-tree",
                 "--dev-root", str(tmp_path / "dev"), "--sys-root", str(tmp_path / "sys"),
                 "--plugin-dir", str(tmp_path / "plugins"), "--vdev-dir", str(tmp_path / "vgpu"),
                 "--etc-vdev", str(tmp_path / "etc"), "--volcano-scheduler-name", "volcano",
                 "--pod-resources-socket", socket)
    service, _, _ = command.build(args, kube)
    assert service.admissions is not None
    assert service.admissions.answer.__self__.socket == socket
