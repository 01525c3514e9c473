"""Mutating admission for the local API server, done as kube-apiserver does it.

For a pod CREATE or UPDATE (any PUT or PATCH, of the pod or its status) and a Binding (CREATE
of pods/binding), every registered MutatingWebhookConfiguration whose rules and selectors
match is called over HTTPS (verified against its caBundle, within timeoutSeconds) with an
AdmissionReview naming the caller (userInfo) and, for an UPDATE, the stored object; its JSON
patch is applied; a denial fails the write with the webhook's message; a call error is
decided by failurePolicy (default Fail). An objectSelector matches when the object or the old
object matches it. matchConditions are not evaluated (no CEL here).
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
import jsonpatch

from hami_dcu.cli.localcluster.apiserver import AdmissionAttributes, AdmissionDenied, LocalApiServer

log = logging.getLogger(__name__)
JSON = dict[str, Any]

# Service name/namespace -> base URL, since the local cluster has no Service networking.
ServiceResolver = Callable[[str, str, int], str]


def selector_matches(selector: JSON | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector: matchLabels and matchExpressions, ANDed; empty matches all."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _labels(obj: JSON) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def rule_matches(rules: list[JSON], operation: str, group: str, version: str, resource: str) -> bool:
    def has(values: list[str], wanted: str) -> bool:
        return "*" in values or wanted in values

    return any(
        has(rule.get("operations") or [], operation) and has(rule.get("apiGroups") or [], group)
        and has(rule.get("apiVersions") or [], version) and has(rule.get("resources") or [], resource)
        for rule in rules
    )


class WebhookDispatcher:
    def __init__(self, server: LocalApiServer, resolve_service: ServiceResolver | None = None,
                 reuse_connections: bool = True) -> None:
        self.server = server
        self.resolve_service = resolve_service
        # kube-apiserver keeps connections to webhooks alive, so a certificate is checked at
        # the handshake only; False makes every call a new handshake (certificate rotation tests).
        self.reuse_connections = reuse_connections
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._session: aiohttp.ClientSession | None = None

    def install(self) -> WebhookDispatcher:
        self.server.admission = self.admit
        self.server.shutdown_hooks.append(self.close)
        return self

    def _ssl(self, ca_bundle_b64: str | None) -> ssl.SSLContext:
        key = ca_bundle_b64 or ""
        if key not in self._contexts:
            context = ssl.create_default_context()
            if ca_bundle_b64:
                context = ssl.create_default_context(cadata=base64.b64decode(ca_bundle_b64).decode())
            self._contexts[key] = context
        return self._contexts[key]

    def _url(self, client_config: JSON) -> tuple[str, str | None]:
        """The URL to call, and the TLS server name to verify when it is not the URL's host."""
        if client_config.get("url"):
            return client_config["url"], None
        service = client_config.get("service") or {}
        if self.resolve_service is None:
            raise RuntimeError("service clientConfig needs a service resolver in the local cluster")
        namespace, name = service.get("namespace", ""), service.get("name", "")
        base = self.resolve_service(namespace, name, int(service.get("port", 443)))
        # kube-apiserver verifies the serving certificate for <service>.<namespace>.svc.
        return base + (service.get("path") or "/"), f"{name}.{namespace}.svc"

    async def admit(self, attributes: AdmissionAttributes) -> JSON:
        obj = attributes.object
        if attributes.resource != "pods":
            return obj
        resource = f"pods/{attributes.subresource}" if attributes.subresource else "pods"
        configs, _ = self.server.store.list("mutatingwebhookconfigurations")
        ns_labels = ((attributes.namespace_object or {}).get("metadata") or {}).get("labels") or {}
        for config in sorted(configs, key=lambda c: c["metadata"]["name"]):
            for hook in config.get("webhooks") or []:
                if not rule_matches(hook.get("rules") or [], attributes.operation, "", "v1", resource):
                    continue
                if not selector_matches(hook.get("namespaceSelector"), ns_labels):
                    continue
                if not any(selector_matches(hook.get("objectSelector"), _labels(o))
                           for o in (obj, attributes.old_object) if o is not None):
                    continue
                obj = await self._call(hook, attributes, obj)
        return obj

    async def _call(self, hook: JSON, attributes: AdmissionAttributes, obj: JSON) -> JSON:
        name = hook.get("name", "?")
        versions = hook.get("admissionReviewVersions") or ["v1"]
        api_version = "admission.k8s.io/v1" if "v1" in versions else "admission.k8s.io/v1beta1"
        uid = str(uuid.uuid4())
        request = _review_request(uid, attributes, obj)
        review: JSON = {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}
        timeout = float(hook.get("timeoutSeconds") or 10)
        client_config = hook.get("clientConfig") or {}
        try:
            result = self._check(await self._post(client_config, timeout, review), api_version, uid)
        except (TimeoutError, aiohttp.ClientError, RuntimeError, ValueError, ssl.SSLError) as exc:
            if hook.get("failurePolicy", "Fail") == "Ignore":
                log.warning("webhook %s failed, ignored by failurePolicy: %s", name, exc)
                return obj
            raise AdmissionDenied(f'Internal error occurred: failed calling webhook "{name}": {exc}', 500) from exc
        return _admitted(name, result, obj)

    async def _post(self, client_config: JSON, timeout: float, review: JSON) -> Any:
        """The webhook's answer to `review`, parsed; raises when it answers other than HTTP 200."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(force_close=not self.reuse_connections)
            self._session = aiohttp.ClientSession(connector=connector)
        url, server_name = self._url(client_config)
        async with self._session.post(f"{url}?timeout={int(timeout)}s", json=review,
                                      ssl=self._ssl(client_config.get("caBundle")), server_hostname=server_name,
                                      timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            if response.status != 200:
                raise RuntimeError(f"webhook answered HTTP {response.status}")
            return await response.json(content_type=None)

    @staticmethod
    def _check(answer: Any, api_version: str, uid: str) -> JSON:
        if not isinstance(answer, dict) or not isinstance(answer.get("response"), dict):
            raise ValueError("webhook response was absent")
        if answer.get("apiVersion") != api_version or answer.get("kind") != "AdmissionReview":
            raise ValueError(f"expected webhook response of {api_version}, Kind=AdmissionReview")
        if answer["response"].get("uid") != uid:
            raise ValueError(f"expected response.uid={uid}, got {answer['response'].get('uid')}")
        return answer["response"]

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _review_request(uid: str, attributes: AdmissionAttributes, obj: JSON) -> JSON:
    """The AdmissionReview's request for `obj`, as kube-apiserver writes it."""
    kind = {"group": "", "version": "v1", "kind": attributes.kind}
    resource = {"group": "", "version": "v1", "resource": "pods"}
    options = "CreateOptions" if attributes.operation == "CREATE" else "UpdateOptions"
    request: JSON = {
        "uid": uid, "kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
        "name": attributes.name, "namespace": attributes.namespace, "operation": attributes.operation,
        "userInfo": attributes.user or {"username": "local-cluster"}, "object": obj,
        "oldObject": attributes.old_object, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options}}
    if attributes.subresource:
        request["subResource"] = request["requestSubResource"] = attributes.subresource
    return request


def _admitted(name: str, result: JSON, obj: JSON) -> JSON:
    """`obj` as the webhook `name` answered `result`: refused, kept, or patched."""
    if not result.get("allowed"):
        status = result.get("status") or {}
        message = status.get("message") or status.get("reason") or "without explanation"
        code = max(int(status.get("code") or 400), 400)
        raise AdmissionDenied(f'admission webhook "{name}" denied the request: {message}', code)
    if result.get("patch"):
        if result.get("patchType") != "JSONPatch":
            raise AdmissionDenied(f'webhook "{name}" answered unsupported patchType {result.get("patchType")}', 500)
        ops = json.loads(base64.b64decode(result["patch"]))
        try:
            obj = jsonpatch.apply_patch(obj, ops)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise AdmissionDenied(f'webhook "{name}" patch cannot be applied: {exc}', 500) from exc
    return obj
