"""Common mistakes end in one line on stderr that names the problem, a non-zero exit code and
no traceback; the real console script runs in a subprocess, as an operator would run it."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ctrl_c import interruptible

from hami_dcu.cli.errors import EXIT_FAILED, run_reporting
from hami_dcu.common.protocol.codec import CodecError
from hami_dcu.webhook import certs

HAMI_DCU = str(Path(sys.executable).parent / "hami-dcu")
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (DEBUG|INFO|WARNING|ERROR) ")


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([HAMI_DCU, *args], capture_output=True, text=True, timeout=timeout)


def the_problem(result: subprocess.CompletedProcess, command: str) -> str:
    """The one stderr line that says what went wrong; log records before it are allowed (a
    server may log that it started its cache), anything else is not."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    problems = [line for line in lines if not LOG_RECORD.match(line)]
    assert len(problems) == 1, result.stderr
    assert problems[0].startswith(f"hami-dcu {command}: "), problems[0]
    return problems[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.fixture
def tls_files(tmp_path) -> tuple[str, str]:
    bundle = certs.issue(["hami-dcu-webhook.kube-system.svc"])
    certs.write_pem_files(tmp_path, {"tls.crt": bundle.cert, "tls.key": bundle.key})
    return str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")


@pytest.mark.parametrize("content", ["clusters: [oops\n", "just a string\n"])
@pytest.mark.parametrize("command", ["status", "scheduler"])
def test_a_kubeconfig_that_is_not_a_kubeconfig(tmp_path, content, command):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(content)
    result = run(command, "--kubeconfig", str(kubeconfig))
    assert result.returncode == 2
    problem = the_problem(result, command)
    assert str(kubeconfig) in problem and ("not valid YAML" in problem or "not a kubeconfig" in problem)


def test_webhook_port_in_use(busy_port, tls_files):
    result = run("webhook", "--bind", f"127.0.0.1:{busy_port}", "--tls-cert", tls_files[0], "--tls-key", tls_files[1])
    assert result.returncode == 2
    assert the_problem(result, "webhook") == (f"hami-dcu webhook: cannot listen on 127.0.0.1:{busy_port}: address "
                                              "already in use (another process holds the port)")


def test_scheduler_port_in_use(busy_port, api_server):
    result = run("scheduler", "--bind", f"127.0.0.1:{busy_port}", "--kubeconfig", str(api_server.kubeconfig_path))
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{busy_port}: address already in use" in the_problem(result, "scheduler")


@pytest.mark.parametrize("command, flags", [
    ("webhook", ["--bind", "0.0.0.0:99999"]),
    ("scheduler", ["--bind", "0.0.0.0:99999"]),
    ("scheduler", ["--metrics-bind", "0.0.0.0:http"]),
])
def test_a_port_out_of_range_or_not_a_number(command, flags, tls_files):
    tls = ["--tls-cert", tls_files[0], "--tls-key", tls_files[1]] if command == "webhook" else []
    result = run(command, *flags, *tls)
    assert result.returncode == 2
    problem = the_problem(result, command)
    assert "port 99999 is out of range (0-65535)" in problem or "port 'http' is not a number" in problem


def test_a_plugin_dir_that_is_missing_or_not_a_directory(tmp_path):
    missing = run("device-plugin", "--node-name", "n1", "--plugin-dir", str(tmp_path / "nope"))
    a_file = tmp_path / "file"
    a_file.write_text("")
    not_dir = run("device-plugin", "--node-name", "n1", "--plugin-dir", str(a_file))
    assert missing.returncode == not_dir.returncode == 2
    assert "no such directory (is the kubelet running" in the_problem(missing, "device-plugin")
    assert the_problem(not_dir, "device-plugin") == f"hami-dcu device-plugin: --plugin-dir {a_file}: not a directory"


def test_demo_into_a_pipe_closed_after_one_line():
    # `hami-dcu demo | head -1`: the reader goes away after the first line.
    demo = subprocess.Popen([HAMI_DCU, "demo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert demo.stdout.readline().startswith("starting a local cluster")
    demo.stdout.close()
    stderr = demo.stderr.read()
    assert demo.wait(timeout=60) == 141
    assert the_problem(subprocess.CompletedProcess([], 141, "", stderr), "demo") == (
        "hami-dcu demo: output closed before the end (broken pipe)")


def test_ctrl_c_in_the_demo():
    demo = subprocess.Popen([HAMI_DCU, "demo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    assert demo.stdout.readline().startswith("starting a local cluster")  # interrupted while it starts
    demo.send_signal(signal.SIGINT)
    stdout, stderr = demo.communicate(timeout=60)
    assert demo.returncode == 130
    assert the_problem(subprocess.CompletedProcess([], 130, stdout, stderr), "demo") == "hami-dcu demo: interrupted"


@pytest.mark.parametrize("flags, message", [
    (["--nodes", "0"], "argument --nodes: 0 is out of range (1-16)"),
    (["--cards", "two"], "argument --cards: 'two' is not a whole number"),
    (["--timeout", "-1"], "argument --timeout: -1 is out of range"),
])
def test_demo_checks_its_arguments(flags, message):
    result = run("demo", *flags)
    assert result.returncode == 2
    assert message in the_problem(result, "demo")


def test_unknown_flag_is_one_line_with_where_to_look():
    result = run("status", "--nodes", "x")
    assert result.returncode == 2
    assert the_problem(result, "status").endswith("unrecognized arguments: --nodes x (see hami-dcu status --help)")


def test_unreachable_api_server(tmp_path):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n")
    result = run("status", "--kubeconfig", str(kubeconfig))
    assert result.returncode == 1
    assert the_problem(result, "status") == (f"hami-dcu status: cannot read nodes and pods: API server "
                                             f"http://127.0.0.1:{port} unreachable: Connection refused")


def test_version():
    result = run("--version")
    assert result.returncode == 0 and re.fullmatch(r"hami-dcu \d+\.\d+\.\d+\S*\n", result.stdout)


# --- issue 23: the last paths that printed a log line or a repr --------------------------------


def test_a_pem_file_that_is_not_a_certificate_or_key_is_one_line(tls_files, tmp_path):
    cert, key = tls_files
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("this is not PEM\n")
    result = run("webhook", "--tls-cert", str(garbage), "--tls-key", key)
    assert result.returncode == 2
    assert the_problem(result, "webhook") == (f"hami-dcu webhook: --tls-cert {garbage}: not a PEM certificate "
                                              "(expected a -----BEGIN CERTIFICATE----- block)")
    result = run("webhook", "--tls-cert", cert, "--tls-key", cert)  # the certificate given as the key
    assert result.returncode == 2 and "--tls-key" in the_problem(result, "webhook") and "not a PEM private key" \
        in result.stderr
    other = certs.issue(["elsewhere.svc"])
    certs.write_pem_files(tmp_path, {"other.key": other.key})
    result = run("scheduler", "--tls-cert", cert, "--tls-key", str(tmp_path / "other.key"))
    assert result.returncode == 2 and "is not the key of --tls-cert" in the_problem(result, "scheduler")


@pytest.mark.parametrize("command", ["device-plugin", "dra-driver"])
def test_a_node_agent_without_node_name_is_one_line(command, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    dirs = ["--plugin-dir", str(tmp_path)] if command == "device-plugin" else []
    result = subprocess.run([HAMI_DCU, command, "--smi", "mock", *dirs], capture_output=True, text=True, timeout=60,
                            env=env)
    assert result.returncode == 2
    assert the_problem(result, command).endswith(
        "no node name: pass --node-name or set NODE_NAME (the downward API's spec.nodeName)")
    assert not LOG_RECORD.match(result.stderr)


def test_a_mock_smi_file_with_a_quantity_is_one_line(tmp_path):
    mock = tmp_path / "cards.yaml"
    mock.write_text('- {serial: S0, model: K100_AI, memory_mib: 64Gi, pci_bus_id: "0000:3D:00.0"}\n')
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                          "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
                          "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n")
    (tmp_path / "plugins").mkdir()
    result = run("device-plugin", "--node-name", "n1", "--kubeconfig", str(kubeconfig), "--smi", "mock",
                 "--mock-devices", str(mock), "--plugin-dir", str(tmp_path / "plugins"),
                 "--vdev-dir", str(tmp_path / "vdev"), "--etc-vdev", str(tmp_path / "etc"))
    assert result.returncode == 2
    assert the_problem(result, "device-plugin") == (
        f"hami-dcu device-plugin: node n1: mock SMI file {mock}: card 0: memory_mib '64Gi' is not a whole number "
        "(MiB, e.g. 65536 for 64Gi)")


def test_common_flags_before_the_subcommand(tmp_path):
    missing = tmp_path / "nope"
    result = run("--log-level", "debug", "status", "--kubeconfig", str(missing))
    assert result.returncode == 2
    assert the_problem(result, "status") == f"hami-dcu status: kubeconfig {missing} does not exist"
    result = run("--kubeconfig", str(missing), "--naming=hcu", "status")
    assert result.returncode == 2 and the_problem(result, "status").endswith(f"kubeconfig {missing} does not exist")
    result = run("--log-level", "debug")
    assert result.returncode == 2
    assert result.stderr == ("hami-dcu: --log-level debug must be followed by a subcommand, e.g. hami-dcu "
                             "--log-level debug status (see hami-dcu --help)\n")


@pytest.mark.parametrize(("command", "flags", "message"), [
    ("device-plugin", ["--slots-per-card", "0"],
     "--slots-per-card: minimum: got 0, want 1 (as the chart's devicePlugin.slotsPerCard)"),
    ("dra-driver", ["--slots-per-card", "17"],
     "--slots-per-card: maximum: got 17, want 16 (as the chart's devicePlugin.slotsPerCard)"),
    ("device-plugin", ["--register-interval", "0"],
     "--register-interval: minimum: got 0, want 5 (as the chart's devicePlugin.registerIntervalSeconds)"),
    ("scheduler", ["--lock-timeout", "5"],
     "--lock-timeout: minimum: got 5, want 10 (as the chart's scheduler.lockTimeoutSeconds)"),
    ("scheduler", ["--lock-wait", "60", "--lock-timeout", "10"],
     "--lock-wait (60) must be below --lock-timeout (10): a node lock older than --lock-timeout is taken over, so "
     "a bind never needs to wait longer; lower --lock-wait or raise --lock-timeout"),
])
def test_the_cli_refuses_what_the_chart_refuses(command, flags, message):
    result = run(command, "--node-name", "n1", *flags) if command != "scheduler" else run(command, *flags)
    assert result.returncode == 2
    assert message in result.stderr.splitlines()[0]
    assert "Traceback" not in result.stderr


def _raises(exc: BaseException):
    def failing() -> int:
        raise exc
    return failing


def test_an_expected_failure_is_its_message_and_a_bug_is_named_as_one(capsys):
    # common/protocol/errors.py's rule: a HamiDcuError is something the world did, said as it is...
    assert run_reporting("hami-dcu status", _raises(CodecError("hami.io/x", "a,b", "not a number"))) == EXIT_FAILED
    said = capsys.readouterr().err
    assert said.startswith("hami-dcu status: ") and "unexpected" not in said and "not a number" in said
    # ...anything else is a bug, named as one.
    assert run_reporting("hami-dcu status", _raises(ZeroDivisionError("division by zero"))) == EXIT_FAILED
    assert "unexpected ZeroDivisionError: division by zero" in capsys.readouterr().err


# --- issue 39: flags accepted that could not work, failures said as log lines -----------------

UNREACHABLE_KUBECONFIG = ("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                          "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
                          "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n")


def _serves_until_sockets(command: list[str], cwd: Path, sockets: list[Path]) -> str:
    """Start a kubelet plugin in `cwd`, wait for its sockets, stop it with SIGTERM; its stderr."""
    plugin = subprocess.Popen([HAMI_DCU, *command], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        deadline = time.monotonic() + 60
        while not all(s.exists() for s in sockets) and plugin.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        served = all(s.exists() for s in sockets)
        if plugin.poll() is None:
            plugin.send_signal(signal.SIGTERM)
        _, stderr = plugin.communicate(timeout=30)
    finally:
        if plugin.poll() is None:
            plugin.kill()
    assert served and plugin.returncode == 0, stderr
    assert "Traceback" not in stderr and "Failed to bind" not in stderr
    return stderr


def _node_flags(cwd: Path) -> list[str]:
    (cwd / "kubeconfig").write_text(UNREACHABLE_KUBECONFIG)  # the plugin keeps serving while the API is away
    return ["--node-name", "n1", "--kubeconfig", "kubeconfig", "--smi", "mock", "--mock-fake-tree",
            "--sys-root", "sys", "--dev-root", "dev", "--vdev-dir", "vdev", "--etc-vdev", "etc", "--state-dir",
            "state"]


def test_a_relative_plugin_dir_is_taken_from_the_working_directory(tmp_path):
    # gRPC reads unix://pd/x as /pd/x: the plugin failed with a C-core line before.
    (tmp_path / "pd").mkdir()
    _serves_until_sockets(["device-plugin", *_node_flags(tmp_path), "--plugin-dir", "pd"], tmp_path,
                          [tmp_path / "pd" / "hygon.com_dcunum.sock"])


def test_relative_kubelet_dirs_of_the_dra_driver_are_taken_from_the_working_directory(tmp_path):
    plugin_socket = tmp_path / "kp" / "dra.hygon.com" / "dra.sock"
    stderr = _serves_until_sockets(
        ["dra-driver", *_node_flags(tmp_path), "--cdi-dir", "cdi", "--kubelet-plugins-dir", "kp",
         "--registry-dir", "rd"], tmp_path, [plugin_socket, tmp_path / "rd" / "dra.hygon.com-reg.sock"])
    assert f"serving on {plugin_socket}," in stderr  # the path the kubelet is told is absolute


@pytest.mark.parametrize(("command", "flags", "message"), [
    ("scheduler", ["--resync", "0"], "argument --resync: '0': expected seconds above 0"),
    ("scheduler", ["--resync", "-1"], "argument --resync: '-1': expected seconds above 0"),
    ("dra-driver", ["--health-interval", "-1"], "argument --health-interval: '-1': expected seconds above 0"),
    ("dra-driver", ["--claim-recheck", "0"], "argument --claim-recheck: '0': expected seconds above 0"),
    ("dra-driver", ["--claim-recheck", "inf"], "argument --claim-recheck: 'inf': expected seconds above 0"),
    ("device-plugin", ["--plugin-dir", ""], "argument --plugin-dir: expected a path, not an empty one"),
])
def test_intervals_that_cannot_work_are_refused(command, flags, message):
    result = run(command, *flags)
    assert result.returncode == 2
    assert the_problem(result, command) == f"hami-dcu {command}: {message} (see hami-dcu {command} --help)"


def test_the_demo_refuses_a_kubeconfig_it_would_not_read(tmp_path):
    result = run("demo", "--kubeconfig", str(tmp_path / "nonexistent"))
    assert result.returncode == 2
    assert result.stdout == ""  # refused before any cluster starts
    assert the_problem(result, "demo") == (
        f"hami-dcu demo: --kubeconfig {tmp_path / 'nonexistent'}: the demo reads no kubeconfig, it runs a local "
        "cluster of its own (with --keep it prints that cluster's kubeconfig for kubectl and hami-dcu status)")


def test_the_demo_stops_waiting_for_pods_that_cannot_be_placed():
    # 1 node x 1 card: two-workers and whole-card never fit. The demo waited its whole --timeout
    # for them and exited 1; it now says they stay Pending, and why, as soon as that is final.
    result = run("demo", "--nodes", "1", "--cards", "1", "--timeout", "60", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "\ntwo-workers, whole-card cannot be placed on 1 node x 1 card (the reasons above): they stay " \
           "Pending; more --nodes or --cards make room\n" in result.stdout
    assert "two-workers is Pending (FilteringFailed): no node fits the DCU request" in result.stdout
    assert "timed out" not in result.stdout


def test_certs_failures_are_one_line_not_a_log_record(tmp_path):
    missing = tmp_path / "missing"
    flags = ["--namespace", "ops", "--service", "wh", "--secret", "wh-tls"]
    result = run("certs", "--kubeconfig", str(missing), *flags)
    assert result.returncode == 2
    assert result.stderr == f"hami-dcu certs: kubeconfig {missing} does not exist\n"
    (tmp_path / "kubeconfig").write_text(UNREACHABLE_KUBECONFIG)
    result = run("certs", "--kubeconfig", str(tmp_path / "kubeconfig"), *flags)
    assert result.returncode == 1
    assert result.stderr == ("hami-dcu certs: Kubernetes API: API server http://127.0.0.1:9 unreachable: "
                             "Connection refused\n")


@pytest.fixture
def outside_a_pod(tmp_path, monkeypatch) -> Path:
    from hami_dcu.scheduler import token_command

    own = tmp_path / "serviceaccount"
    monkeypatch.setattr(token_command, "SA_DIR", own)
    monkeypatch.delenv("HOSTNAME", raising=False)
    return own


def test_token_outside_a_pod_says_where_to_run_it(outside_a_pod, tmp_path, capsys):
    from hami_dcu.cli.main import main

    argv = ["token", "--service-account", "hami-dcu-scheduler", "--dir", str(tmp_path / "out"), "--once"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"hami-dcu token: no ServiceAccount token at {outside_a_pod}: run it inside the scheduler pod, where the "
        "kubelet mounts the pod's token, CA and namespace there\n")
    outside_a_pod.mkdir()
    assert main(argv) == 2
    assert capsys.readouterr().err == (f"hami-dcu token: no ServiceAccount namespace at {outside_a_pod}/namespace: "
                                       "run it inside the scheduler pod, or give --namespace\n")
    assert main([*argv, "--namespace", "kube-system"]) == 2
    assert capsys.readouterr().err == (
        f"hami-dcu token: no ServiceAccount ca.crt at {outside_a_pod}/ca.crt: run it inside the scheduler pod "
        "(the extender is given the cluster CA beside its token)\n")
    assert main([*argv, "--expiration-seconds", "60"]) == 2
    assert capsys.readouterr().err == ("hami-dcu token: --expiration-seconds 60: at least 600 (the API server's "
                                       "minimum)\n")


def test_token_once_that_gets_no_token_is_one_line(outside_a_pod, tmp_path, capsys):
    from hami_dcu.cli.main import main

    outside_a_pod.mkdir()
    (outside_a_pod / "namespace").write_text("kube-system\n")
    (outside_a_pod / "ca.crt").write_text("CA\n")
    (tmp_path / "kubeconfig").write_text(UNREACHABLE_KUBECONFIG)
    argv = ["token", "--kubeconfig", str(tmp_path / "kubeconfig"), "--service-account", "hami-dcu-scheduler",
            "--dir", str(tmp_path / "out"), "--once"]
    assert main(argv) == 1
    assert capsys.readouterr().err == ("hami-dcu token: no token for kube-system/hami-dcu-scheduler: API server "
                                       "http://127.0.0.1:9 unreachable: Connection refused\n")
