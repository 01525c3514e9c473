"""Issue 35, finding 5, the opt-in half: `webhook.clientAuth`, on a real control plane whose
kube-apiserver presents a client certificate to the webhook, configured as the README says
(`--admission-control-config-file`: an AdmissionConfiguration whose kubeconfig gives
`hami-dcu-webhook.kube-system.svc` a client certificate signed by a CA of its own).

The chart in DRA mode with `webhook.clientAuth.enabled`, that CA and the certificate's name:
the API server's reviews are answered, so a rewritten pod's template is created while it is
reviewed, before the pod is stored (no deferral); anything else posting to the webhook port
(no certificate, the cluster CA's admin certificate, the right CA's certificate for another
name) is refused before its review is read.

    pytest -m realcluster e2e/test_realcluster_webhook_auth.py
"""

from __future__ import annotations

import json
import shutil
import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.realcluster import cluster as cluster_module
from e2e.realcluster.cluster import RELEASE, SYSTEM_NAMESPACE, unavailable
from e2e.realcluster.controlplane import ControlPlane
from e2e.realcluster.dra_cluster import DraRealCluster
from e2e.realcluster.pki import KeyPair, Pki
from e2e.scenarios import wait_until
from hami_dcu.cli.localcluster.pods import MockCard
from hami_dcu.common.io.kube import KubeError
from hami_dcu.common.protocol.dra import names

JSON = dict[str, Any]
NODE = "node0"
CLIENT_NAME = "kube-apiserver-webhook-client"
_REASON = unavailable()
pytestmark = pytest.mark.realcluster


def admission_config(directory: Path, client: KeyPair) -> Path:
    """What the README tells an operator to give kube-apiserver: its client certificate for
    calls to the webhook's Service (`<service>.<namespace>.svc`, port 443)."""
    kubeconfig = directory / "webhook-client.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "users": [{"name": f"{RELEASE}-webhook.{SYSTEM_NAMESPACE}.svc",
                   "user": {"client-certificate": str(client.cert), "client-key": str(client.key)}}]}))
    config = directory / "admission.yaml"
    plugin = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
              "kubeConfigFile": str(kubeconfig)}
    config.write_text(json.dumps({
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
        "plugins": [{"name": "MutatingAdmissionWebhook", "configuration": plugin},
                    {"name": "ValidatingAdmissionWebhook", "configuration": plugin}]}))
    return config


class Setup:
    def __init__(self, cluster: DraRealCluster, pki: Pki) -> None:
        self.cluster, self.pki = cluster, pki

    @property
    def url(self) -> str:
        (scheduler,) = self.cluster.kube.list_pods(namespace=SYSTEM_NAMESPACE,
                                                   label_selector="app.kubernetes.io/component=scheduler").items
        return f"https://{scheduler['status']['podIP']}:9443/webhook"


@pytest.fixture(scope="module")
def setup() -> Iterator[Setup]:
    if _REASON:
        pytest.skip(_REASON)
    workdir = Path(tempfile.mkdtemp(prefix="hami-rc-auth-", dir="/tmp"))
    workdir.chmod(0o755)
    pki = Pki(workdir / "webhook-client-ca")  # a CA of its own: it signs the API server's certificate only
    config = admission_config(pki.dir, pki.client("apiserver", CLIENT_NAME))
    values = {"webhook": {"clientAuth": {"enabled": True, "caBundle": pki.ca.read_text(),
                                         "allowedNames": [CLIENT_NAME]}}}

    class WithAdmissionConfig(ControlPlane):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.apiserver_args.append(f"--admission-control-config-file={config}")

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(cluster_module, "ControlPlane", WithAdmissionConfig)
            with DraRealCluster({NODE: [MockCard(serial="AUTH0", pci_bus_id="0000:3D:00.0")]}, values=values,
                                workdir=workdir) as real:
                yield Setup(real, pki)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # given, so the cluster leaves it behind


def _post(url: str, body: JSON, client: KeyPair | None = None) -> tuple[int, JSON]:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def hami_style(name: str, memory: str) -> JSON:
    return {"metadata": {"name": name}, "spec": {"terminationGracePeriodSeconds": 0, "containers": [
        {"name": "main", "image": "busybox", "resources": {"limits": {
            "hygon.com/dcunum": "1", "hygon.com/dcumem": memory, "hygon.com/dcucores": "25"}}}]}}


def forged(namespace: str, pod: JSON) -> JSON:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "forged", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": namespace,
        "operation": "CREATE", "userInfo": {"username": "system:anonymous"}, "object": pod}}


def templates(setup: Setup, namespace: str) -> set[str]:
    path = f"{names.RESOURCE_API}/namespaces/{namespace}/resourceclaimtemplates"
    return {t["metadata"]["name"] for t in setup.cluster.kube.request("GET", path)["items"]}


def test_the_api_servers_reviews_create_the_template_while_reviewing(setup: Setup) -> None:
    kube, namespace = setup.cluster.kube, setup.cluster.namespace
    created = kube.create_pod(namespace, hami_style("proven", "2000"))
    template = created["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    # There when the create returns: made in the review, which the API server was proven to send.
    assert template in templates(setup, namespace)
    assert names.PENDING_TEMPLATES not in (created["metadata"].get("annotations") or {})

    def running() -> bool:
        return (kube.get_pod(namespace, "proven").get("status") or {}).get("phase") == "Running"

    wait_until("the proven pod running", running, timeout=60, interval=0.2)


def test_anyone_else_is_refused_before_the_review_is_read(setup: Setup) -> None:
    review = forged("kube-public", hami_style("forged", "3000"))
    status, answer = _post(setup.url, review)
    assert status == 403 and "only the API server" in answer["error"]
    # The right CA, another name.
    status, answer = _post(setup.url, review, setup.pki.client("other", "system:node:node0"))
    assert status == 403 and "none of them allowed" in answer["error"]
    # The cluster's own CA (the admin's certificate): the handshake fails (HTTPError is caught in _post).
    with pytest.raises(OSError):
        _post(setup.url, review, setup.cluster.control_plane.admin)  # type: ignore[union-attr]
    assert not templates(setup, "kube-public")
    # The same review from the API server's certificate is answered.
    status, answer = _post(setup.url, review, setup.pki.client("apiserver-again", CLIENT_NAME))
    assert status == 200 and answer["response"]["allowed"] is True


def test_a_proven_quota_refusal_names_the_quota(setup: Setup) -> None:
    kube, namespace = setup.cluster.kube, setup.cluster.namespace
    quotas = f"/api/v1/namespaces/{namespace}/resourcequotas"
    kube.request("POST", quotas, body={"metadata": {"name": "dcu-quota"},
                                       "spec": {"hard": {"limits.hygon.com/dcumem": "2500"}}})
    try:
        attempts = iter(range(1000))

        def refusal() -> str | None:
            name = f"over-{next(attempts)}"
            try:
                kube.create_pod(namespace, hami_style(name, "3000"))
            except KubeError as exc:
                return str(exc) if "quota" in str(exc) else None
            kube.delete_pod(namespace, name)  # admitted before the webhook saw the quota
            return None

        message = wait_until("the webhook sees the quota", refusal, timeout=60, interval=0.5)
        assert "ResourceQuota dcu-quota limits.hygon.com/dcumem: quota 2500" in message
    finally:
        kube.request("DELETE", f"{quotas}/dcu-quota")
