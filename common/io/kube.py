"""The Kubernetes access layer: exactly the calls our components make, on plain dicts.

Every call goes through `Kube.request`, the one seam between hami-dcu and the API server.
It asks the `kubernetes` client for the raw response (`_preload_content=False`) and parses
the JSON itself, so no API object is ever turned into the client's model classes (slow,
and the Binding response cannot even be parsed by them: the server answers a Status).

Errors are typed: `NotFoundError` (404), `ConflictError` (409), `GoneError` (410, a watch
that must relist), `UnreachableError` (no answer at all), `KubeError` for the rest.
`AsyncKube` runs the same calls on a thread pool for aiohttp code.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from hami_dcu.common.io.version import installed_version
from hami_dcu.common.protocol.errors import HamiDcuError

log = logging.getLogger(__name__)

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class KubeConfigError(HamiDcuError, RuntimeError):
    """No usable cluster configuration (kubeconfig missing or broken, not in a cluster)."""


class KubeError(HamiDcuError, RuntimeError):
    """The API server answered with an error status. To our own callers that is a service
    unavailable for now (`status` is the API server's, `http_status` ours)."""

    http_status = 503
    grpc_code = "UNAVAILABLE"

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")


class NotFoundError(KubeError):
    pass


class ConflictError(KubeError):
    """409: a stale resourceVersion, an existing name, or a pod already bound."""

    http_status = 409
    grpc_code = "ABORTED"


class GoneError(KubeError):
    """410: the resourceVersion is too old to watch from; list again."""


class UnreachableError(KubeError):
    """The API server did not answer (refused, reset, timed out)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "Unreachable", message)
        self.args = (message,)  # there was no answer, so no "0 Unreachable:" status to show


@dataclass(frozen=True)
class ObjectList:
    items: list[JSON]
    resource_version: str
    continue_token: str = ""  # a paged list's next page ("" on the last one)


def kubeconfig_path(kubeconfig: str | None = None) -> str | None:
    """The kubeconfig to read, by kubectl's rules: `--kubeconfig`, else `$KUBECONFIG` (a path
    list, merged), else `~/.kube/config` when it exists; None means the in-cluster service
    account."""
    if kubeconfig:
        return kubeconfig
    listed = os.environ.get("KUBECONFIG")
    if listed:
        return listed
    home = os.path.expanduser(os.path.join("~", ".kube", "config"))
    return home if os.path.isfile(home) else None


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> k8s_client.ApiClient:
    """A client configured as kubectl would be (`kubeconfig_path`). `context` picks a
    kubeconfig context, as kubectl's --context."""
    configuration = k8s_client.Configuration()
    path = kubeconfig_path(kubeconfig)
    try:
        if path:
            # kubectl skips the missing files of a list and fails only when none exists.
            if not any(os.path.exists(p) for p in path.split(os.pathsep) if p):
                raise KubeConfigError(f"kubeconfig {path} does not exist")
            if context is not None:
                _check_context(path, context)
            k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        elif context is not None:
            raise KubeConfigError(f"no context {context}: there is no kubeconfig to take it from (no --kubeconfig, "
                                  "KUBECONFIG or ~/.kube/config)")
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)
    except ConfigException as exc:
        where = path or "in-cluster service account (no --kubeconfig, KUBECONFIG or ~/.kube/config)"
        raise KubeConfigError(f"cannot load Kubernetes configuration from {where}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise KubeConfigError(f"kubeconfig {path} is not valid YAML: {_yaml_problem(exc)}") from exc
    except (TypeError, AttributeError) as exc:
        # Valid YAML of the wrong shape (a list, a string): the client trips over it.
        raise KubeConfigError(f"kubeconfig {path} is not a kubeconfig (expected a mapping with clusters, "
                              f"contexts and users): {exc}") from exc
    # Fail fast when the API server is down: callers have their own retry and backoff.
    configuration.retries = 1
    # Watches and the thread pool of AsyncKube share the pool: keep connections instead of
    # opening (and discarding) new ones under load.
    configuration.connection_pool_maxsize = 32
    return k8s_client.ApiClient(configuration)


def _check_context(path: str, context: str) -> None:
    """`context` is one of the kubeconfig's, or a line that names the ones there are (the
    client's own words are "Expected object with name ... in .../contexts list")."""
    contexts, _ = k8s_config.list_kube_config_contexts(config_file=path)
    names = [str(c.get("name")) for c in contexts or [] if isinstance(c, dict)]
    if context not in names:
        raise KubeConfigError(f"no context {context} in {path} (contexts: {', '.join(names) or 'none'})")


_COMPONENT = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


def user_agent(component: str) -> str:
    """`hami-dcu-<component>/<version>`: what a component's requests name it by. kube-apiserver
    takes a request's field manager (`managedFields`) from the User-Agent up to the first '/',
    and its audit log records the whole; the client's default names every Python client alike."""
    if not _COMPONENT.fullmatch(component):
        raise ValueError(f"component name {component!r}: lowercase letters, digits and '-' only")
    return f"hami-dcu-{component}/{installed_version() or '0.0.0'}"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line: what the parser expected and where (PyYAML's own text spans several lines)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem


def _root_cause(exc: urllib3.exceptions.HTTPError) -> str:
    """"Connection refused" rather than urllib3's nested MaxRetryError(NewConnectionError(...))
    text, which repeats the host three times."""
    text = str(getattr(exc, "reason", None) or exc)
    found = re.search(r"\[Errno -?\d+\] ([^\"')]+)", text)
    return found.group(1).strip() if found else text


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


class Kube:
    """Synchronous access to the API server on plain dicts."""

    def __init__(self, api_client: k8s_client.ApiClient, timeout: float = 10.0, agent: str | None = None) -> None:
        """`agent`: the User-Agent to send (`user_agent(component)`); the client's default when None."""
        self.api_client = api_client
        self.timeout = timeout
        if agent is not None:
            api_client.user_agent = agent

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, timeout: float = 10.0, context: str | None = None,
                        agent: str | None = None) -> Kube:
        return cls(load_api_client(kubeconfig, context), timeout=timeout, agent=agent)

    # --- the seam ------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> JSON:
        response = self._send(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        try:
            data = response.data
        finally:
            response.release_conn()
        return json.loads(data) if data else {}

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None,
        body: Any,
        content_type: str,
        timeout: float | tuple[float, float] | None,
        stream: bool = False,
    ) -> Any:
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            return self.api_client.call_api(
                path,
                method,
                query_params=params,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=timeout if timeout is not None else self.timeout,
            )
        except ApiException as exc:
            raise _typed_error(exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            host = self.api_client.configuration.host
            raise UnreachableError(f"API server {host} unreachable: {_root_cause(exc)}") from exc

    # --- nodes ---------------------------------------------------------------------------

    def get_node(self, name: str) -> JSON:
        return self.request("GET", f"/api/v1/nodes/{_quote(name)}")

    def list_nodes(self, label_selector: str | None = None) -> ObjectList:
        return _object_list(self.request("GET", "/api/v1/nodes", query={"labelSelector": label_selector}))

    def list_resource_quotas(self) -> ObjectList:
        return _object_list(self.request("GET", "/api/v1/resourcequotas"))

    def list_disruption_budgets(self, namespace: str) -> ObjectList:
        return _object_list(self.request("GET", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"))

    def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """Evict the pod through the Eviction API (its PodDisruptionBudgets checked by the API
        server: 429 raises KubeError). The uid precondition spares a new pod of the same name."""
        self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body={
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}}})

    def list_page(self, path: str, limit: int, continue_token: str = "",
                  keep: Callable[[JSON], JSON] | None = None) -> ObjectList:
        """One page of at most `limit` items of the list at `path` (`continue_token`: the
        previous page's). Every page shows the same snapshot, the first page's
        resourceVersion; an expired token raises GoneError (list again from the start).
        `keep` trims each item as it is read, so a large list never sits whole in memory."""
        page = _object_list(self.request("GET", path, query={"limit": limit, "continue": continue_token or None}))
        if keep is not None:
            page.items[:] = [keep(item) for item in page.items]
        return page

    def watch_nodes(
        self, resource_version: str, timeout_seconds: int = 300, label_selector: str | None = None
    ) -> Iterator[JSON]:
        return self.watch("/api/v1/nodes", resource_version, timeout_seconds, label_selector=label_selector)

    def create_node(self, node: JSON) -> JSON:
        """Register a Node object (what a kubelet does when it joins)."""
        return self.request("POST", "/api/v1/nodes", body=node)

    def delete_node(self, name: str) -> JSON:
        return self.request("DELETE", f"/api/v1/nodes/{_quote(name)}")

    def patch_node_metadata(
        self,
        name: str,
        annotations: dict[str, str | None] | None = None,
        labels: dict[str, str | None] | None = None,
        resource_version: str | None = None,
    ) -> JSON:
        """Merge-patch annotations/labels (None deletes a key); with `resource_version` the
        patch is a compare-and-swap and a stale version raises ConflictError."""
        return self.request(
            "PATCH",
            f"/api/v1/nodes/{_quote(name)}",
            body=_metadata_patch(annotations, labels, resource_version),
            content_type=MERGE_PATCH,
        )

    def patch_node_status(self, name: str, status: JSON) -> JSON:
        return self.request(
            "PATCH", f"/api/v1/nodes/{_quote(name)}/status", body={"status": status}, content_type=MERGE_PATCH
        )

    # --- pods ----------------------------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> JSON:
        return self.request("GET", _pod_path(namespace, name))

    def list_pods(
        self,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> ObjectList:
        path = f"/api/v1/namespaces/{_quote(namespace)}/pods" if namespace else "/api/v1/pods"
        return _object_list(
            self.request("GET", path, query={"fieldSelector": field_selector, "labelSelector": label_selector})
        )

    def watch_pods(
        self,
        resource_version: str,
        timeout_seconds: int = 300,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> Iterator[JSON]:
        return self.watch(
            "/api/v1/pods",
            resource_version,
            timeout_seconds,
            field_selector=field_selector,
            label_selector=label_selector,
        )

    def create_pod(self, namespace: str, pod: JSON) -> JSON:
        return self.request("POST", f"/api/v1/namespaces/{_quote(namespace)}/pods", body=pod)

    def delete_pod(self, namespace: str, name: str) -> JSON:
        return self.request("DELETE", _pod_path(namespace, name))

    def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        annotations: dict[str, str | None] | None = None,
        labels: dict[str, str | None] | None = None,
        resource_version: str | None = None,
    ) -> JSON:
        return self.request(
            "PATCH",
            _pod_path(namespace, name),
            body=_metadata_patch(annotations, labels, resource_version),
            content_type=MERGE_PATCH,
        )

    def patch_pod_status(self, namespace: str, name: str, status: JSON) -> JSON:
        return self.request(
            "PATCH", _pod_path(namespace, name) + "/status", body={"status": status}, content_type=MERGE_PATCH
        )

    def create_binding(
        self,
        namespace: str,
        name: str,
        node: str,
        uid: str | None = None,
        annotations: dict[str, str] | None = None,
    ) -> None:
        """Bind the pod to the node. The API server merges `annotations` into the pod in the
        same atomic update. 409 (already bound, uid mismatch) raises ConflictError."""
        metadata: JSON = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        if annotations:
            metadata["annotations"] = annotations
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        # The answer is a Status, not a Binding: we only need "no error".
        self.request("POST", _pod_path(namespace, name) + "/binding", body=body)

    # --- events --------------------------------------------------------------------------

    def create_event(
        self,
        regarding: JSON,
        reason: str,
        message: str,
        event_type: str = "Normal",
        component: str = "hami-dcu",
    ) -> JSON:
        """Post a core/v1 Event about `regarding` (a pod or node dict)."""
        meta = regarding.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": regarding.get("kind") or ("Pod" if meta.get("namespace") else "Node"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        return self.request("POST", f"/api/v1/namespaces/{_quote(namespace)}/events", body=event)

    # --- watch ---------------------------------------------------------------------------

    def watch(
        self,
        path: str,
        resource_version: str,
        timeout_seconds: int = 300,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> Iterator[JSON]:
        """Yield watch events (`{"type", "object"}`) after `resource_version` until the
        server closes the stream. An in-stream 410 raises GoneError; BOOKMARKs are yielded
        too (only their resourceVersion means anything)."""
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds,
            "allowWatchBookmarks": "true",
            "fieldSelector": field_selector,
            "labelSelector": label_selector,
        }
        connect = self.timeout
        response = self._send(
            "GET",
            path,
            query=query,
            body=None,
            content_type="application/json",
            timeout=(connect, timeout_seconds + 30),
            stream=True,
        )
        try:
            for line in _json_lines(response):
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    code = int(status.get("code") or 500)
                    error = GoneError if code == 410 else KubeError
                    raise error(code, status.get("reason", ""), status.get("message", ""))
                yield event
        except urllib3.exceptions.HTTPError as exc:
            raise UnreachableError(f"watch {path} broken: {exc}") from exc
        finally:
            response.release_conn()


def _json_lines(response: Any) -> Iterator[bytes]:
    buffer = b""
    for chunk in response.stream(65536, decode_content=True):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{_quote(namespace)}/pods/{_quote(name)}"


def _metadata_patch(
    annotations: dict[str, str | None] | None,
    labels: dict[str, str | None] | None,
    resource_version: str | None,
) -> JSON:
    metadata: JSON = {}
    if annotations:
        metadata["annotations"] = annotations
    if labels:
        metadata["labels"] = labels
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {"metadata": metadata}


def _object_list(body: JSON) -> ObjectList:
    meta = body.get("metadata") or {}
    return ObjectList(
        items=list(body.get("items") or []),
        resource_version=str(meta.get("resourceVersion", "")),
        continue_token=str(meta.get("continue") or ""),
    )


def _typed_error(exc: ApiException) -> KubeError:
    status = int(exc.status or 0)
    reason, message = str(exc.reason or ""), ""
    body = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if body:
        try:
            parsed = json.loads(body)
        except ValueError:
            message = body[:256]
        else:
            if isinstance(parsed, dict) and parsed.get("kind") == "Status":
                message = str(parsed.get("message", ""))
                reason = str(parsed.get("reason") or reason)
    if status == 0:
        return UnreachableError(f"{reason} {message}".strip())
    cls = {404: NotFoundError, 409: ConflictError, 410: GoneError}.get(status, KubeError)
    return cls(status, reason, message)


T = TypeVar("T")


class AsyncKube:
    """The same calls for asyncio code, run on a private thread pool so the event loop
    never blocks and long watches never starve short calls."""

    def __init__(self, kube: Kube, max_workers: int = 32) -> None:
        self.kube = kube
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="kube")

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    async def get_node(self, name: str) -> JSON:
        return await self.call(self.kube.get_node, name)

    async def get_pod(self, namespace: str, name: str) -> JSON:
        return await self.call(self.kube.get_pod, namespace, name)

    async def list_nodes(self, label_selector: str | None = None) -> ObjectList:
        return await self.call(self.kube.list_nodes, label_selector)

    async def list_page(self, path: str, limit: int, continue_token: str = "",
                        keep: Callable[[JSON], JSON] | None = None) -> ObjectList:
        return await self.call(self.kube.list_page, path, limit, continue_token, keep)

    async def list_resource_quotas(self) -> ObjectList:
        return await self.call(self.kube.list_resource_quotas)

    async def list_disruption_budgets(self, namespace: str) -> ObjectList:
        return await self.call(self.kube.list_disruption_budgets, namespace)

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        await self.call(self.kube.evict_pod, namespace, name, uid)

    async def list_pods(
        self, namespace: str | None = None, field_selector: str | None = None, label_selector: str | None = None
    ) -> ObjectList:
        return await self.call(self.kube.list_pods, namespace, field_selector, label_selector)

    async def patch_node_metadata(
        self,
        name: str,
        annotations: dict[str, str | None] | None = None,
        labels: dict[str, str | None] | None = None,
        resource_version: str | None = None,
    ) -> JSON:
        return await self.call(self.kube.patch_node_metadata, name, annotations, labels, resource_version)

    async def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        annotations: dict[str, str | None] | None = None,
        labels: dict[str, str | None] | None = None,
        resource_version: str | None = None,
    ) -> JSON:
        return await self.call(self.kube.patch_pod_metadata, namespace, name, annotations, labels, resource_version)

    async def create_binding(
        self, namespace: str, name: str, node: str, uid: str | None = None, annotations: dict[str, str] | None = None
    ) -> None:
        await self.call(self.kube.create_binding, namespace, name, node, uid, annotations)

    async def create_event(
        self, regarding: JSON, reason: str, message: str, event_type: str = "Normal", component: str = "hami-dcu"
    ) -> JSON:
        return await self.call(self.kube.create_event, regarding, reason, message, event_type, component)

    async def watch(
        self,
        path: str,
        resource_version: str,
        timeout_seconds: int = 300,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> AsyncIterator[JSON]:
        """Bridge the blocking watch stream into the loop through a queue fed by a thread."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()

        def pump() -> None:
            try:
                for event in self.kube.watch(path, resource_version, timeout_seconds, field_selector, label_selector):
                    if stop.is_set():
                        return
                    loop.call_soon_threadsafe(queue.put_nowait, ("event", event))
                loop.call_soon_threadsafe(queue.put_nowait, ("end", None))
            except BaseException as exc:  # delivered to the consumer, re-raised there
                if not loop.is_closed():
                    loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))

        threading.Thread(target=pump, name=f"watch {path}", daemon=True).start()
        try:
            while True:
                kind, payload = await queue.get()
                if kind == "event":
                    yield payload
                elif kind == "error":
                    raise payload
                else:
                    return
        finally:
            stop.set()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
