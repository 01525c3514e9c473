"""`certs` against the local API server, and pods created through it going through the webhook."""

import base64
import datetime as dt

import pytest
from cryptography import x509

from hami_dcu.cli.localcluster.admission import WebhookDispatcher, selector_matches
from hami_dcu.common.io.kube import KubeError
from hami_dcu.common.protocol import keys
from hami_dcu.webhook.certs import WEBHOOK_CONFIG_PATH, CertBundle, ensure, issue, renewal_reason, service_dns_names

DCU = keys.DCU_NAMING  # the naming set these tests speak

NS, SERVICE, SECRET, CONFIG = "kube-system", "hami-dcu-webhook", "hami-dcu-webhook-tls", "hami-dcu-webhook"


def webhook_config(url_or_service: dict, failure_policy="Fail", ca_bundle=None, extra=None) -> dict:
    client = dict(url_or_service)
    if ca_bundle:
        client["caBundle"] = ca_bundle
    hook = {"name": "dcu.hami.io", "clientConfig": client, "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "failurePolicy": failure_policy, "timeoutSeconds": 5,
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                                        "values": ["kube-system"]}]},
            "objectSelector": {"matchExpressions": [{"key": keys.WEBHOOK_LABEL, "operator": "NotIn",
                                                     "values": [keys.WEBHOOK_IGNORE]}]}, **(extra or {})}
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": CONFIG}, "webhooks": [hook]}


def dcu_pod(name, labels=None, **limits):
    limits = limits or {DCU.resources.count: "1", DCU.resources.memory: "1000"}
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]}}


def test_ensure_creates_then_keeps_then_renews(kube):
    kube.request("POST", WEBHOOK_CONFIG_PATH, body=webhook_config({"service": {"namespace": NS, "name": SERVICE}}))
    bundle, action = ensure(kube, NS, SERVICE, SECRET, CONFIG)
    assert action.startswith("issued (no secret")
    cert = x509.load_pem_x509_certificate(bundle.cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"{SERVICE}.{NS}.svc" in sans and f"{SERVICE}.{NS}.svc.cluster.local" in sans
    secret = kube.request("GET", f"/api/v1/namespaces/{NS}/secrets/{SECRET}")
    # The serving Secret (mounted by the webhook) never holds the CA key; the CA Secret does.
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    ca_secret = kube.request("GET", f"/api/v1/namespaces/{NS}/secrets/{SECRET}-ca")
    assert base64.b64decode(ca_secret["data"]["ca.key"]) == bundle.ca_key
    assert base64.b64decode(ca_secret["data"]["ca.crt"]) == bundle.ca_cert
    stored = kube.request("GET", f"{WEBHOOK_CONFIG_PATH}/{CONFIG}")
    assert base64.b64decode(stored["webhooks"][0]["clientConfig"]["caBundle"]) == bundle.ca_cert

    again, action = ensure(kube, NS, SERVICE, SECRET, CONFIG)
    assert action == "kept" and again == bundle

    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=340)  # 25 days before the serving cert expires
    renewed, action = ensure(kube, NS, SERVICE, SECRET, CONFIG, now=later)
    assert action.startswith("issued (serving certificate expires")
    assert renewed.cert != bundle.cert and renewed.ca_cert == bundle.ca_cert  # the CA is kept


def test_ca_key_is_moved_out_of_an_old_layout_serving_secret(kube):
    """Finding 7 (issue 11): ca.key sat in the serving Secret mounted into the extender.
    A Secret of that layout is migrated: same CA and serving pair, the key moved away."""
    old = issue(service_dns_names(SERVICE, NS))
    data = {**old.secret_data(), "ca.key": base64.b64encode(old.ca_key).decode()}
    kube.request("POST", f"/api/v1/namespaces/{NS}/secrets",
                 body={"metadata": {"name": SECRET}, "type": "kubernetes.io/tls", "data": data})
    bundle, action = ensure(kube, NS, SERVICE, SECRET, None)
    assert action == "kept (moved the CA key out of the serving secret)"
    assert bundle == old
    serving = kube.request("GET", f"/api/v1/namespaces/{NS}/secrets/{SECRET}")["data"]
    assert "ca.key" not in serving and base64.b64decode(serving["tls.crt"]) == old.cert
    ca_secret = kube.request("GET", f"/api/v1/namespaces/{NS}/secrets/{SECRET}-ca")["data"]
    assert base64.b64decode(ca_secret["ca.key"]) == old.ca_key
    assert ensure(kube, NS, SERVICE, SECRET, None) == (old, "kept")


def test_a_lost_ca_secret_issues_a_new_ca(kube):
    first, _ = ensure(kube, NS, SERVICE, SECRET, None)
    kube.request("DELETE", f"/api/v1/namespaces/{NS}/secrets/{SECRET}-ca")
    again, action = ensure(kube, NS, SERVICE, SECRET, None)
    assert action == "issued (secret incomplete)" and again.ca_cert != first.ca_cert
    serving = kube.request("GET", f"/api/v1/namespaces/{NS}/secrets/{SECRET}")["data"]
    assert base64.b64decode(serving["ca.crt"]) == again.ca_cert and "ca.key" not in serving


def test_renewal_reasons():
    bundle = issue(service_dns_names("svc", "ns"))
    assert renewal_reason(bundle, service_dns_names("svc", "ns")) is None
    assert "not valid for" in renewal_reason(bundle, service_dns_names("other", "ns"))
    foreign = issue(["x"])
    mixed = CertBundle(ca_cert=foreign.ca_cert, ca_key=foreign.ca_key, cert=bundle.cert, key=bundle.key)
    assert renewal_reason(mixed, ["svc.ns.svc"]) == "not signed by the stored CA"


def test_selectors():
    assert selector_matches(None, {})
    assert selector_matches({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"})
    assert not selector_matches({"matchLabels": {"a": "1"}}, {"a": "2"})
    expr = lambda op, values=None: {"matchExpressions": [{"key": "k", "operator": op, "values": values or []}]}  # noqa
    assert selector_matches(expr("In", ["x"]), {"k": "x"}) and not selector_matches(expr("In", ["x"]), {})
    assert selector_matches(expr("NotIn", ["x"]), {}) and not selector_matches(expr("NotIn", ["x"]), {"k": "x"})
    assert selector_matches(expr("Exists"), {"k": ""}) and not selector_matches(expr("DoesNotExist"), {"k": ""})


@pytest.fixture
def admitted(api_server, kube, served_webhook):
    """The served webhook registered with its CA; the local API server calls it on pod CREATE."""
    ca = base64.b64encode(served_webhook.bundle.ca_cert).decode()
    kube.request("POST", WEBHOOK_CONFIG_PATH, body=webhook_config({"url": served_webhook.url + "/webhook"},
                                                                  ca_bundle=ca))
    WebhookDispatcher(api_server).install()
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "team"}})
    return kube


def test_created_pod_comes_back_mutated(admitted):
    created = admitted.create_pod("team", dcu_pod("train"))
    assert created["spec"]["schedulerName"] == "hami-scheduler"
    assert admitted.get_pod("team", "train")["spec"]["schedulerName"] == "hami-scheduler"


def test_denied_create_fails_with_the_webhook_message(admitted):
    with pytest.raises(KubeError) as info:
        admitted.create_pod("team", dcu_pod("bad", **{DCU.resources.count: "1",
                                                      DCU.resources.cores: "250"}))
    assert info.value.status == 403
    assert 'admission webhook "dcu.hami.io" denied the request' in info.value.message
    assert "0-100" in info.value.message
    assert admitted.list_pods(namespace="team").items == []


def test_selectors_exclude_namespace_and_labelled_pods(admitted):
    in_system = admitted.create_pod("kube-system", dcu_pod("sys"))
    assert in_system["spec"]["schedulerName"] == "default-scheduler"
    skipped = admitted.create_pod("team", dcu_pod("skip", labels={keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE}))
    assert skipped["spec"]["schedulerName"] == "default-scheduler"


def test_wrong_ca_and_failure_policy(api_server, kube, served_webhook):
    other_ca = base64.b64encode(issue(["x"]).ca_cert).decode()
    kube.request("POST", WEBHOOK_CONFIG_PATH, body=webhook_config({"url": served_webhook.url + "/webhook"},
                                                                  ca_bundle=other_ca))
    WebhookDispatcher(api_server).install()
    with pytest.raises(KubeError) as info:
        kube.create_pod("default", dcu_pod("untrusted"))
    assert "failed calling webhook" in info.value.message and "CERTIFICATE_VERIFY_FAILED" in info.value.message
    kube.request("PATCH", f"{WEBHOOK_CONFIG_PATH}/{CONFIG}", content_type="application/json-patch+json",
                 body=[{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}])
    assert kube.create_pod("default", dcu_pod("ignored"))["spec"]["schedulerName"] == "default-scheduler"


def test_a_renewal_that_may_not_create_says_how_to_get_the_secret_back(kube, monkeypatch):
    """The renewal CronJob may update the two Secrets but create none (issue 21): a deleted one
    is an error naming `helm upgrade`, and nothing is written."""
    real = kube.request

    def forbidden_create(method, path, **kwargs):
        if method == "POST" and path.endswith("/secrets"):
            raise KubeError(403, "Forbidden", 'secrets is forbidden: User "renewal" cannot create resource')
        return real(method, path, **kwargs)

    monkeypatch.setattr(kube, "request", forbidden_create)
    with pytest.raises(KubeError) as refused:
        ensure(kube, NS, SERVICE, SECRET, None)
    assert refused.value.status == 403
    assert f"secret {NS}/{SECRET}-ca is missing and this job may not create it" in refused.value.message
    assert "helm upgrade" in refused.value.message and "cannot create resource" in refused.value.message
