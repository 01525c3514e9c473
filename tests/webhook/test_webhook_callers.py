"""Issue 35, finding 5: the webhook acted for anyone who could reach its port.

40 hand-made AdmissionReviews (no client certificate, `userInfo: system:anonymous`, a pod in
`kube-public`) made the extender create 40 ResourceClaimTemplates in `kube-public` within a
second, and a forged review for another namespace answered that namespace's quota name, limit
and use. Now a review creates nothing unless its caller is proven the API server (a client
certificate, webhook.clientAuth): the templates a pod still needs travel on the pod and are
created once the extender's watch shows it stored; and an unproven caller's quota refusal names
no figure of the quota.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from test_webhook_dra import DRA_SETTINGS, TEAM_QUOTA, FakeKube, Proven, claim_object, claim_review, container, pod

from e2e.realcluster.pki import Pki
from hami_dcu.common.io.kube import AsyncKube, ConflictError, KubeError
from hami_dcu.common.io.tls import ReloadingTLS
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.quota import Amount
from hami_dcu.webhook.callers import ClientAuth, certificate_names
from hami_dcu.webhook.decision import DRA, Settings, review
from hami_dcu.webhook.deferredtemplates import DeferredTemplates
from hami_dcu.webhook.draclaims import DraClaims
from hami_dcu.webhook.pendingtemplates import decode, encode, shape_problem
from hami_dcu.webhook.server import build_app

JSON = dict[str, Any]
ANONYMOUS = {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
QUOTA_EVERYWHERE = Settings(naming=keys.DCU_NAMING, mode=DRA,
                            quota=lambda ns: (TEAM_QUOTA, Amount(memory=4000, cores=40)))


def forged(namespace: str, pod_: JSON, uid: str = "forged") -> JSON:
    """An AdmissionReview as anyone can write one: no API server behind it."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": namespace,
                        "operation": "CREATE", "userInfo": ANONYMOUS, "object": pod_}}


def share(memory: int) -> JSON:
    return pod(container(**{"hygon.com/dcunum": "1", "hygon.com/dcumem": str(memory), "hygon.com/dcucores": "25"}))


def patched(response: JSON, original: JSON) -> JSON:
    return jsonpatch.apply_patch(original, json.loads(base64.b64decode(response["patch"])))


def posts(fake: FakeKube) -> list[str]:
    return [path for method, path in fake.calls if method == "POST"]


async def serve(aiohttp_client: Any, fake: FakeKube, settings: Settings = DRA_SETTINGS,
                client_auth: ClientAuth | None = None) -> Any:
    dra = DraClaims(AsyncKube(fake))  # type: ignore[arg-type]
    return await aiohttp_client(build_app(settings, CollectorRegistry(), dra=dra, client_auth=client_auth))


# --- the attack, replayed ------------------------------------------------------------------


async def test_forty_forged_reviews_create_no_template(aiohttp_client):
    """The finding's reproducer: 40 shapes, one review each, for kube-public, from nobody."""
    fake = FakeKube()
    client = await serve(aiohttp_client, fake)
    for i in range(40):
        response = await client.post("/webhook", json=forged("kube-public", share(1000 + i), f"u{i}"))
        assert response.status == 200
        assert (await response.json())["response"]["allowed"] is True
    assert not fake.templates and not posts(fake)  # 40 templates in kube-public before


async def test_an_unproven_review_lists_the_missing_templates_on_the_pod_and_the_stored_pod_gets_them(
        aiohttp_client):
    """The same review from the API server (unproven too, without webhook.clientAuth): the pod
    is rewritten as always and carries the templates it waits for; the extender creates them
    when its watch shows the pod, in the pod's namespace, exactly as a proven review would."""
    fake = FakeKube()
    client = await serve(aiohttp_client, fake)
    original = share(2000)
    response = (await (await client.post("/webhook", json=forged("team", original))).json())["response"]
    assert response["allowed"] is True and not posts(fake)
    stored = patched(response, original)
    [made] = review(original, DRA_SETTINGS).templates
    name = made["metadata"]["name"]
    assert stored["spec"]["resourceClaims"] == [{"name": "dcu-main", "resourceClaimTemplateName": name}]
    assert json.loads(stored["metadata"]["annotations"][names.PENDING_TEMPLATES]) == {name: made["spec"]}

    stored["metadata"].update(namespace="team", uid="pod-uid")
    deferred = DeferredTemplates(DraClaims(AsyncKube(fake)))  # type: ignore[arg-type]
    deferred.seen(stored)
    await deferred.idle()
    assert fake.templates == {("team", name): made}
    # Seen again (the pod's next event) before the template watch shows it: not created twice.
    deferred.seen(stored)
    await deferred.idle()
    assert len(posts(fake)) == 1


async def test_an_unproven_review_whose_templates_exist_adds_nothing(aiohttp_client):
    fake = FakeKube()
    [made] = review(share(2000), DRA_SETTINGS).templates
    fake.templates[("team", made["metadata"]["name"])] = made
    client = await serve(aiohttp_client, fake)
    response = (await (await client.post("/webhook", json=forged("team", share(2000)))).json())["response"]
    assert names.PENDING_TEMPLATES not in patched(response, share(2000))["metadata"].get("annotations", {})


async def test_a_forged_review_reads_no_quota_figures(aiohttp_client):
    """Before: `pod exceeds ResourceQuota team-dcu limits.hygon.com/dcucores: quota 50, used 40,
    requested 25` for any namespace named in a forged review."""
    fake = FakeKube()
    client = await serve(aiohttp_client, fake, QUOTA_EVERYWHERE)
    for body in (forged("other-team", share(2000)), claim_review(claim_object("36"), namespace="other-team"),
                 claim_review({"metadata": {"name": "t"}, "spec": {"spec": claim_object("96")["spec"]}},
                              "ResourceClaimTemplate", namespace="other-team")):
        answer = (await (await client.post("/webhook", json=body)).json())["response"]
        message = answer["status"]["message"]
        assert answer["allowed"] is False and "DCU quota of namespace other-team" in message
        assert "kubectl describe resourcequota -n other-team" in message
        assert "team-dcu" not in message and "quota 50" not in message and "used" not in message.split(":")[0]
        assert not any(figure in message for figure in ("50", "40", "25", "4000", "10000"))
    # A caller proven the API server's gets the figures, as the namespace's owner sees them.
    proven = await serve(aiohttp_client, fake, QUOTA_EVERYWHERE, Proven())
    answer = (await (await proven.post("/webhook", json=forged("team", share(2000)))).json())["response"]
    assert "ResourceQuota team-dcu limits.hygon.com/dcucores: quota 50, used 40" in answer["status"]["message"]


# --- the stored pod's templates: only what the webhook would write -------------------------


def whole_card(count: int = 1) -> JSON:
    return {"spec": {"devices": {"requests": [{"name": "dcu", "exactly": {
        "deviceClassName": names.DEVICE_CLASS, "allocationMode": "ExactCount", "count": count}}]}}}


@pytest.mark.parametrize(("limits", "units"), [
    ({"hygon.com/dcunum": "2"}, (120,)),
    ({"hygon.com/dcunum": "1", "hygon.com/dcumem": "4096"}, (120,)),
    ({"hygon.com/dcunum": "1", "hygon.com/dcucores": "30"}, (120,)),
    ({"hygon.com/dcunum": "1", "hygon.com/dcumem": "1000", "hygon.com/dcucores": "10"}, (60, 120)),
])
def test_every_shape_the_webhook_writes_round_trips(limits, units):
    made = review(pod(container(**limits)), Settings(naming=keys.DCU_NAMING, mode=DRA, card_units=units)).templates
    assert made and all(shape_problem(t["spec"]) is None for t in made)
    decoded, problems = decode(encode(made), {t["metadata"]["name"] for t in made})
    assert decoded == made and not problems


def _tampered() -> list[tuple[str, JSON]]:
    admin = whole_card()
    admin["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    other = whole_card()
    other["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.nvidia.com"
    metadata = {**whole_card(), "metadata": {"labels": {"x": "y"}}}
    config = whole_card()
    config["spec"]["devices"]["config"] = [{"opaque": {"driver": "x", "parameters": {}}}]
    cel = whole_card()
    cel["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": "true"}}]
    return [("admin-access", admin), ("another-class", other), ("claim-metadata", metadata),
            ("opaque-config", config), ("any-selector", cel)]


@pytest.mark.parametrize(("what", "spec"), _tampered(), ids=[w for w, _ in _tampered()])
def test_a_spec_the_webhook_never_writes_is_not_created(what, spec):
    from hami_dcu.common.protocol.dra.translate import template_name

    name = template_name(spec)
    decoded, problems = decode(json.dumps({name: spec}), {name})
    assert not decoded and problems, what


def test_a_template_under_another_name_or_not_named_by_the_pod_is_not_created():
    from hami_dcu.common.protocol.dra.translate import template_name

    spec = whole_card()
    assert decode(json.dumps({"hami-dcu-0000000000000000": spec}), {"hami-dcu-0000000000000000"})[0] == []
    assert decode(json.dumps({template_name(spec): spec}), {"something-else"})[0] == []
    assert decode("not json", {"x"})[0] == [] and decode("x" * 70000, {"x"})[0] == []


def stored_pod(annotation: str, *named: str, namespace: str = "team", **meta: Any) -> JSON:
    return {"metadata": {"name": "p", "namespace": namespace, "uid": "u", **meta,
                         "annotations": {names.PENDING_TEMPLATES: annotation}},
            "spec": {"resourceClaims": [{"name": f"c{i}", "resourceClaimTemplateName": n}
                                        for i, n in enumerate(named)]}}


async def test_the_extender_creates_nothing_the_watch_already_shows_or_for_a_deleted_pod():
    made = review(share(2000), DRA_SETTINGS).templates
    name = made[0]["metadata"]["name"]
    fake = FakeKube()
    shown = DeferredTemplates(DraClaims(AsyncKube(fake), known_template=lambda ns, n: made[0]))  # type: ignore[arg-type]
    shown.seen(stored_pod(encode(made), name))
    deleting = DeferredTemplates(DraClaims(AsyncKube(fake)))  # type: ignore[arg-type]
    deleting.seen(stored_pod(encode(made), name, deletionTimestamp="2026-01-01T00:00:00Z"))
    await asyncio.gather(shown.idle(), deleting.idle())
    assert not fake.calls


async def test_a_template_planted_meanwhile_is_said_and_a_failed_create_is_tried_again(caplog):
    made = review(share(2000), DRA_SETTINGS).templates
    name = made[0]["metadata"]["name"]
    fake = FakeKube()
    fake.templates[("team", name)] = {**made[0], "spec": whole_card()}
    deferred = DeferredTemplates(DraClaims(AsyncKube(fake)))  # type: ignore[arg-type]
    deferred.seen(stored_pod(encode(made), name))
    await deferred.idle()
    assert "someone else created meanwhile" in caplog.text

    fake = FakeKube()
    fake.fail_create = KubeError(500, "InternalError", "etcd")
    deferred = DeferredTemplates(DraClaims(AsyncKube(fake)))  # type: ignore[arg-type]
    deferred.seen(stored_pod(encode(made), name))
    await deferred.idle()
    assert not fake.templates and "trying again" in caplog.text
    fake.fail_create = None
    deferred.seen(stored_pod(encode(made), name))
    await deferred.idle()
    assert list(fake.templates) == [("team", name)]
    assert isinstance(ConflictError(409, "", ""), KubeError)


# --- client certificates: only the API server is answered -----------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    def __init__(self, url: str, pki: Pki, other: Pki, fake: FakeKube) -> None:
        self.url, self.pki, self.other, self.fake = url, pki, other, fake

    def call(self, path: str, body: JSON | None = None, client: Any = None) -> tuple[int, JSON | str]:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        if client is not None:
            context.load_cert_chain(str(client.cert), str(client.key))
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as response:
                text = response.read().decode()
                return response.status, json.loads(text) if body is not None else text
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read().decode())


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A DRA webhook over TLS that asks for the API server's client certificate: signed by its
    own CA, named `kube-apiserver-webhook-client`."""
    pki, other = Pki(tmp_path / "pki"), Pki(tmp_path / "other")
    serving = pki.server("serving", ["localhost"], ["127.0.0.1"])
    tls = ReloadingTLS(str(serving.cert), str(serving.key), client_ca=str(pki.ca))
    fake = FakeKube()
    dra = DraClaims(AsyncKube(fake))  # type: ignore[arg-type]
    app = build_app(DRA_SETTINGS, CollectorRegistry(), dra=dra,
                    client_auth=ClientAuth(frozenset({"kube-apiserver-webhook-client"})))
    port, loop, started = _free_port(), asyncio.new_event_loop(), threading.Event()
    runner = web.AppRunner(app, access_log=None)

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls.context).start())
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(10)
    yield Served(f"https://127.0.0.1:{port}", pki, other, fake)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_with_client_auth_only_the_api_servers_certificate_is_answered(served: Served):
    review_ = forged("team", share(2000))
    # No certificate: refused before the body is read; nothing read or created.
    status, answer = served.call("/webhook", review_)
    assert status == 403 and "only the API server" in answer["error"]
    # A certificate the CA signed, for another name (a kubelet's, say): refused.
    kubelet = served.pki.client("kubelet", "system:node:node0", ("system:nodes",))
    status, answer = served.call("/webhook", review_, kubelet)
    assert status == 403 and "system:node:node0" in answer["error"]
    assert not served.fake.calls
    # Another CA's certificate fails the handshake (TLS 1.3: seen when the answer is read; an
    # HTTP error would be answered, not raised).
    stranger = served.other.client("stranger", "kube-apiserver-webhook-client")
    with pytest.raises(OSError):
        served.call("/webhook", review_, stranger)
    # The API server's: answered, and its review creates the template before admitting the pod.
    apiserver = served.pki.client("apiserver", "kube-apiserver-webhook-client")
    status, answer = served.call("/webhook", review_, apiserver)
    assert status == 200 and answer["response"]["allowed"] is True
    assert len(served.fake.templates) == 1
    # The kubelet's probes need no certificate.
    assert served.call("/healthz")[0] == 200


def test_certificate_names_and_allowed_subjects():
    peer = {"subject": ((("organizationName", "system:masters"),), (("commonName", "admin"),)),
            "subjectAltName": (("DNS", "apiserver.example"), ("IP Address", "10.0.0.1"))}
    assert certificate_names(peer) == {"admin", "apiserver.example"}
    assert ClientAuth().refusal(peer) is None
    assert ClientAuth(frozenset({"apiserver.example"})).refusal(peer) is None
    assert "none of them allowed" in (ClientAuth(frozenset({"x"})).refusal(peer) or "")
    assert ClientAuth().refusal(None) is not None and ClientAuth().refusal({}) is not None
    assert certificate_names({"subject": "junk", "subjectAltName": [("DNS",)]}) == frozenset()
