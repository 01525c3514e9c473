"""`hami-dcu scheduler` as the chart runs it: TLS from files, and the webhook on the same port."""

import base64
import json
import socket
import ssl
import subprocess
import sys
import time
import urllib.request

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
