"""The webhook over HTTPS: both AdmissionReview versions, bad bodies, limits, metrics, fuzz."""

import base64
import json
import os
import ssl
import urllib.request
from urllib.error import HTTPError

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_dcu.common.protocol import keys
from hami_dcu.webhook.certs import issue

DCU = keys.DCU_NAMING  # the naming set these tests speak


def post(served, body: bytes, path="/webhook"):
    context = ssl.create_default_context(cafile=str(served.ca_file))
    request = urllib.request.Request(served.url + path, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def get(served, path):
    context = ssl.create_default_context(cafile=str(served.ca_file))
    with urllib.request.urlopen(served.url + path, context=context, timeout=10) as response:
        return response.status, response.read().decode()


def review(api_version="admission.k8s.io/v1", **pod_spec):
    pod = {"metadata": {"name": "p", "namespace": "default"},
           "spec": {"schedulerName": "default-scheduler", "containers": [
               {"name": "c", "resources": {"limits": {DCU.resources.count: "1"}}}], **pod_spec}}
    return {"apiVersion": api_version, "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "default",
                        "operation": "CREATE", "object": pod}}


@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_review_round_trip_over_https(served_webhook, api_version):
    status, answer = post(served_webhook, json.dumps(review(api_version)).encode())
    assert status == 200
    assert answer["apiVersion"] == api_version and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == "u-1" and response["allowed"] is True and response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"}]


@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_denial_carries_status_message(served_webhook, api_version):
    status, answer = post(served_webhook, json.dumps(review(api_version, nodeName="n1")).encode())
    assert status == 200
    assert answer["apiVersion"] == api_version and answer["response"]["uid"] == "u-1"
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["code"] == 403
    assert "spec.nodeName" in answer["response"]["status"]["message"]
    assert "patch" not in answer["response"]


@pytest.mark.parametrize("body", [b"", b"not json", b"[]", b'{"kind":"AdmissionReview"}',
                                  json.dumps({**review(), "apiVersion": "v9"}).encode(),
                                  json.dumps({**review(), "request": {"uid": ""}}).encode()])
def test_malformed_bodies_get_400_with_a_message(served_webhook, body):
    status, answer = post(served_webhook, body)
    assert status == 400 and answer["error"]


@pytest.mark.parametrize("pod", [{"spec": {"containers": "x"}}, {"spec": {"containers": ["c"]}},
                                 {"spec": {"containers": [{"name": "c", "resources": 5}]}}])
def test_wrongly_typed_pods_get_400(served_webhook, pod):
    body = review()
    body["request"]["object"] = pod
    status, answer = post(served_webhook, json.dumps(body).encode())
    assert status == 400 and "malformed" in answer["error"]


def test_body_over_one_mib_is_refused(served_webhook):
    status, _ = post(served_webhook, b" " * (1024 * 1024 + 10))
    assert status == 413


def test_non_pod_or_non_create_is_allowed_unchanged(served_webhook):
    body = review()
    body["request"]["operation"] = "UPDATE"
    status, answer = post(served_webhook, json.dumps(body).encode())
    assert status == 200 and answer["response"]["allowed"] and "patch" not in answer["response"]


def test_health_and_metrics(served_webhook):
    assert get(served_webhook, "/healthz") == (200, "ok")
    assert get(served_webhook, "/readyz")[0] == 200
    post(served_webhook, json.dumps(review()).encode())
    post(served_webhook, json.dumps(review(nodeName="n1")).encode())
    post(served_webhook, b"not json")
    _, text = get(served_webhook, "/metrics")
    assert 'hami_dcu_webhook_reviews_total{decision="rejected",reason="bad-request"} 1.0' in text
    assert 'hami_dcu_webhook_reviews_total{decision="allowed",reason="routed"} 1.0' in text
    assert 'hami_dcu_webhook_reviews_total{decision="denied",reason="node-name-set"} 1.0' in text
    assert "hami_dcu_webhook_review_seconds_bucket" in text


def test_certificate_rotation_is_picked_up(served_webhook, tmp_path):
    renewed = issue(["localhost"], ip_addresses=["127.0.0.1"],
                    ca=(served_webhook.bundle.ca_cert, served_webhook.bundle.ca_key))
    cert_file, key_file = served_webhook.tls.cert_file, served_webhook.tls.key_file
    with open(cert_file, "wb") as f:
        f.write(renewed.cert)
    with open(key_file, "wb") as f:
        f.write(renewed.key)
    os.utime(cert_file, ns=(1, 10**18))
    assert served_webhook.tls.reload_if_changed()
    served = ssl.create_default_context(cafile=str(served_webhook.ca_file))
    import socket

    host, port = served_webhook.url.removeprefix("https://").split(":")
    with socket.create_connection((host, int(port))) as raw, served.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        assert s.getpeercert(binary_form=True) == ssl.PEM_cert_to_DER_cert(renewed.cert.decode())


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=4), max_leaves=20)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode()),
                 st.builds(lambda req: json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                                   "request": req}).encode(), json_values)))
def test_fuzzed_bodies_get_4xx_or_a_review_and_server_keeps_serving(served_webhook, body):
    status, answer = post(served_webhook, body)
    assert status == 400 or (status == 200 and answer["kind"] == "AdmissionReview" and "uid" in answer["response"])
    assert post(served_webhook, json.dumps(review()).encode())[0] == 200
