"""The chart's `helm test` pod, run for real: its script against `hami-dcu scheduler` started with
the rendered Deployment's own arguments (TLS from a Secret-like directory, the local API server),
through the port the Service targets (the webhook listener)."""

import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hami_dcu.webhook.certs import issue


def rendered(render, *values: str) -> tuple[list[str], dict, str]:
    docs = render(*values)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    extender = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender")
    test_pod = next(d for d in docs if d["kind"] == "Pod")
    (check,) = test_pod["spec"]["containers"]
    assert check["command"] == ["python", "-c"]
    return extender["args"], {e["name"]: e["value"] for e in check["env"]}, check["args"][0]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def scheduler_as_rendered(args: list[str], tls_dir: Path, kubeconfig: Path,
                          client_ca: Path | None = None) -> Iterator[tuple[str, str]]:
    """Run the extender container's argv locally: only the listen addresses and the mount
    points of the TLS Secret (and the client CA) change. Yields the base URLs of the webhook
    listener (what the Service targets) and of the extender listener (loopback in the pod)."""
    webhook, extender, metrics = free_port(), free_port(), free_port()
    local = {"--bind": f"127.0.0.1:{extender}", "--webhook-bind": f"127.0.0.1:{webhook}",
             "--metrics-bind": f"127.0.0.1:{metrics}", "--tls-cert": str(tls_dir / "tls.crt"),
             "--tls-key": str(tls_dir / "tls.key"), "--client-ca": str(client_ca)}
    argv = [f"{flag}={local[flag]}" if flag in local else arg for arg in args for flag in [arg.split("=", 1)[0]]]
    process = subprocess.Popen([sys.executable, "-m", "hami_dcu.cli.main", *argv, "--kubeconfig", str(kubeconfig)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"https://127.0.0.1:{webhook}"
    context = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/readyz", context=context, timeout=1):
                    break
            except OSError:
                assert process.poll() is None, process.stdout.read().decode()
                assert time.monotonic() < deadline, "scheduler never became ready"
                time.sleep(0.1)
        yield base, f"https://127.0.0.1:{extender}"
    finally:
        process.terminate()
        process.wait(10)


def run_helm_test(script: str, env: dict[str, str], base: str, tls_dir: Path) -> subprocess.CompletedProcess:
    env = {**env, "BASE": base, "CA_FILE": str(tls_dir / "ca.crt")}
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)


def tls_secret(tmp_path: Path) -> Path:
    """What `hami-dcu certs` puts in the Secret, for the Service name plus loopback."""
    bundle = issue(["hami-dcu-webhook.kube-system.svc"], ip_addresses=["127.0.0.1"])
    for name, data in (("tls.crt", bundle.cert), ("tls.key", bundle.key), ("ca.crt", bundle.ca_cert)):
        (tmp_path / name).write_bytes(data)
    return tmp_path


def test_helm_test_passes_against_the_rendered_scheduler(render, api_server, tmp_path):
    args, env, script = rendered(render, "--set", "scheduler.name=dcu-scheduler")
    tls_dir = tls_secret(tmp_path)
    with scheduler_as_rendered(args, tls_dir, api_server.kubeconfig_path) as (base, _):
        result = run_helm_test(script, env, base, tls_dir)
        expecting_other_profile = run_helm_test(script, {**env, "SCHEDULER_NAME": "other"}, base, tls_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "webhook answers, extender unreachable"
    assert expecting_other_profile.returncode == 1
    assert expecting_other_profile.stdout.strip() == "/webhook: unexpected answer"


def test_helm_test_fails_when_the_service_leads_to_the_extender(render, api_server, tmp_path):
    """The check that catches issue 11's finding 6: pointed at the extender's listener (what
    the Service used to target), the test fails on /filter and /bind: served there (over TLS,
    as before --plain-bind), or not speaking the webhook's TLS at all (the chart's plain loopback)."""
    args, env, script = rendered(render)
    tls_dir = tls_secret(tmp_path)
    for extender_args in ([a for a in args if a != "--plain-bind"], args):
        with scheduler_as_rendered(extender_args, tls_dir, api_server.kubeconfig_path) as (_, extender):
            result = run_helm_test(script, env, extender, tls_dir)
        assert result.returncode == 1
        plain = "--plain-bind" in extender_args
        for verb in ("/filter", "/bind"):
            expected = f"{verb} not served: " + ("" if plain else "unexpected answer")
            assert expected in result.stdout, result.stdout


def test_helm_test_rejects_a_certificate_from_another_ca(render, api_server, tmp_path):
    args, env, script = rendered(render)
    served, other = tmp_path / "served", tmp_path / "other"
    served.mkdir()
    other.mkdir()
    tls_dir = tls_secret(served)
    (other / "ca.crt").write_bytes(issue(["elsewhere"]).ca_cert)
    with scheduler_as_rendered(args, tls_dir, api_server.kubeconfig_path) as (base, _):
        result = run_helm_test(script, env, base, other)
    assert result.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in result.stdout


def test_with_client_auth_the_helm_test_checks_that_a_caller_without_a_certificate_is_refused(
        render, api_server, tmp_path):
    """webhook.clientAuth (issue 35, finding 5): the test pod holds no API server certificate,
    so it is refused; and the check that expects an answer fails against such a webhook."""
    from e2e.realcluster.pki import Pki

    pki = Pki(tmp_path / "client-pki")
    args, env, script = rendered(render, "--set", "webhook.clientAuth.enabled=true",
                                 "--set-file", f"webhook.clientAuth.caBundle={pki.ca}")
    assert "--client-ca=/client-ca/ca.crt" in args and env["CLIENT_AUTH"] == "true"
    tls_dir = tls_secret(tmp_path)
    with scheduler_as_rendered(args, tls_dir, api_server.kubeconfig_path, client_ca=pki.ca) as (base, _):
        result = run_helm_test(script, env, base, tls_dir)
        answer_expected = run_helm_test(script, {**env, "CLIENT_AUTH": "false"}, base, tls_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert answer_expected.returncode == 1 and "/webhook: HTTP Error 403" in answer_expected.stdout
