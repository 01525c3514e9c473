"""`hami-dcu scheduler` as the chart runs it: TLS from files, and the webhook on the same port."""

import base64
import contextlib
import json
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

from hami_dcu.webhook.certs import issue


def test_tls_and_served_webhook(api_server, tmp_path):
    bundle = issue(["localhost"], ip_addresses=["127.0.0.1"])
    for name, data in (("tls.crt", bundle.cert), ("tls.key", bundle.key), ("ca.crt", bundle.ca_cert)):
        (tmp_path / name).write_bytes(data)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "hami_dcu.cli.main", "scheduler", "--kubeconfig", str(api_server.kubeconfig_path),
         "--bind", f"127.0.0.1:{port}", "--tls-cert", str(tmp_path / "tls.crt"), "--tls-key",
         str(tmp_path / "tls.key"), "--serve-webhook"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    base = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{base}/readyz", context=context, timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.1)
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
            "namespace": "default", "object": {"metadata": {"name": "p"}, "spec": {
                "schedulerName": "default-scheduler",
                "containers": [{"name": "c", "resources": {"limits": {"hygon.com/dcunum": "1"}}}]}}}}
        request = urllib.request.Request(f"{base}/webhook", data=json.dumps(review).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            answer = json.loads(response.read())["response"]
        assert answer["uid"] == "u1" and answer["allowed"] is True
        assert json.loads(base64.b64decode(answer["patch"]))[0]["value"] == "hami-scheduler"
    finally:
        process.terminate()
        process.wait(10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _status(url: str, context: ssl.SSLContext | None, body: dict | None = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_each_audience_has_its_own_listener(api_server, tmp_path):
    """Issue 11, finding 6: /filter and /bind answered anyone who reached the Service (shared
    with the webhook). Now the webhook port serves no /filter, /bind or /metrics, and /metrics
    has a port of its own."""
    extender, webhook, metrics = _free_port(), _free_port(), _free_port()
    with _served(api_server, tmp_path, webhook, "--bind", f"127.0.0.1:{extender}", "--metrics-bind",
                 f"127.0.0.1:{metrics}", "--scheduler-identity", "system:serviceaccount:ns:ext") as context:
        pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}}
        filter_args = {"Pod": pod, "NodeNames": ["n"]}
        on_webhook = f"https://127.0.0.1:{webhook}"
        assert _status(f"{on_webhook}/filter", context, filter_args) == 404
        assert _status(f"{on_webhook}/bind", context, {"PodName": "p"}) == 404
        assert _status(f"{on_webhook}/metrics", context) == 404
        on_extender = f"https://127.0.0.1:{extender}"
        assert _status(f"{on_extender}/filter", context, filter_args) == 200
        assert _status(f"{on_extender}/metrics", context) == 404
        assert _status(f"{on_extender}/webhook", context, {}) == 404
        assert _status(f"http://127.0.0.1:{metrics}/metrics", None) == 200
        assert _status(f"http://127.0.0.1:{metrics}/readyz", None) == 200  # the chart's probes
        assert _status(f"http://127.0.0.1:{metrics}/filter", None, filter_args) == 404
        # The webhook listener applies the one-writer rule with the identities it was given.
        binding = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Binding"}, "operation": "CREATE",
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "binding",
            "namespace": "default", "object": {"metadata": {"name": "p", "annotations": {
                "hami.io/dcu-devices-allocated": "DCU-X,DCU,1,1:;"}}}}}
        for user, allowed in (("alice", False), ("system:serviceaccount:ns:ext", True)):
            binding["request"]["userInfo"] = {"username": user}
            request = urllib.request.Request(f"{on_webhook}/webhook", data=json.dumps(binding).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, context=context, timeout=5) as response:
                assert json.loads(response.read())["response"]["allowed"] is allowed


def _ready(url: str, context: ssl.SSLContext) -> bool:
    try:
        return _status(url, context) == 200
    except OSError:
        return False


def test_extender_listens_on_loopback_by_default():
    from hami_dcu.cli.main import build_parser

    parser, _ = build_parser()
    args = parser.parse_args(["scheduler"])
    assert args.bind == "127.0.0.1:8443" and args.webhook_bind == "" and args.metrics_bind == ""


def test_plain_bind_serves_kube_scheduler_without_tls_and_the_webhook_with_it(api_server, tmp_path):
    """The chart's layout: /filter and /bind in plain HTTP on loopback, the webhook over TLS."""
    extender, webhook = _free_port(), _free_port()
    with _served(api_server, tmp_path, webhook, "--bind", f"127.0.0.1:{extender}", "--plain-bind") as context:
        pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}}
        assert _status(f"http://127.0.0.1:{extender}/filter", None, {"Pod": pod, "NodeNames": ["n"]}) == 200
        assert _status(f"https://127.0.0.1:{webhook}/readyz", context) == 200


@contextlib.contextmanager
def _served(api_server, tmp_path, webhook: int, *flags: str) -> Iterator[ssl.SSLContext]:
    """`hami-dcu scheduler` with a fresh serving certificate, the webhook on `webhook` and
    `flags`, until its webhook is ready; yields a client context trusting its CA."""
    bundle = issue(["localhost"], ip_addresses=["127.0.0.1"])
    for name, data in (("tls.crt", bundle.cert), ("tls.key", bundle.key), ("ca.crt", bundle.ca_cert)):
        (tmp_path / name).write_bytes(data)
    process = subprocess.Popen(
        [sys.executable, "-m", "hami_dcu.cli.main", "scheduler", "--kubeconfig", str(api_server.kubeconfig_path),
         "--webhook-bind", f"127.0.0.1:{webhook}", "--tls-cert", str(tmp_path / "tls.crt"),
         "--tls-key", str(tmp_path / "tls.key"), *flags],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    try:
        deadline = time.monotonic() + 20
        while _ready(f"https://127.0.0.1:{webhook}/readyz", context) is False:
            assert process.poll() is None and time.monotonic() < deadline, process.stdout.read().decode()
            time.sleep(0.1)
        yield context
    finally:
        process.terminate()
        process.wait(10)


def test_with_client_ca_the_webhook_answers_only_the_api_servers_certificate(api_server, tmp_path):
    """Issue 35, finding 5, as the chart runs it with webhook.clientAuth: /webhook refuses a
    caller without a certificate the given CA signed for an allowed name; the probes and
    kube-scheduler's plain /filter never ask for one."""
    from e2e.realcluster.pki import Pki

    pki = Pki(tmp_path / "client-pki")
    extender, webhook = _free_port(), _free_port()
    with _served(api_server, tmp_path, webhook, "--bind", f"127.0.0.1:{extender}", "--plain-bind",
                 "--client-ca", str(pki.ca), "--client-name", "kube-apiserver-webhook-client") as context:
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
            "namespace": "default", "object": {"metadata": {"name": "p"}, "spec": {
                "containers": [{"name": "c", "resources": {"limits": {"hygon.com/dcunum": "1"}}}]}}}}
        url = f"https://127.0.0.1:{webhook}/webhook"
        assert _status(url, context, review) == 403
        other = pki.client("other", "system:node:n1")
        with_other = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        with_other.load_cert_chain(str(other.cert), str(other.key))
        assert _status(url, with_other, review) == 403
        apiserver = pki.client("apiserver", "kube-apiserver-webhook-client")
        proven = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        proven.load_cert_chain(str(apiserver.cert), str(apiserver.key))
        assert _status(url, proven, review) == 200
        assert _status(f"https://127.0.0.1:{webhook}/readyz", context) == 200
        pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}}
        assert _status(f"http://127.0.0.1:{extender}/filter", None, {"Pod": pod, "NodeNames": ["n"]}) == 200


def test_client_ca_is_refused_where_no_webhook_is_served(tmp_path):
    from hami_dcu.cli.main import main

    bundle = issue(["localhost"], ip_addresses=["127.0.0.1"])
    for name, data in (("tls.crt", bundle.cert), ("tls.key", bundle.key), ("ca.crt", bundle.ca_cert)):
        (tmp_path / name).write_bytes(data)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text('{"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "c", "cluster": '
                          '{"server": "https://127.0.0.1:1"}}], "users": [{"name": "u", "user": {}}], '
                          '"contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}], '
                          '"current-context": "c"}')
    code = main(["scheduler", "--kubeconfig", str(kubeconfig), "--tls-cert", str(tmp_path / "tls.crt"),
                 "--tls-key", str(tmp_path / "tls.key"), "--client-ca", str(tmp_path / "ca.crt")])
    assert code == 2
