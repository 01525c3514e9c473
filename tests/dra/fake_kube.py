"""A stand-in for the API server's resource.k8s.io objects in unit tests: ResourceClaims,
the ResourceSlice, one Node, events. The real API server is exercised by the e2e suite."""

import copy

from hami_dcu.common.io.kube import ConflictError, KubeError, NotFoundError, UnreachableError

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


class FakeKube:
    def __init__(self, node: str) -> None:
        self.node = {"metadata": {"name": node, "uid": "node-uid"}, "status": {"allocatable": {}}}
        self.claims: dict[tuple[str, str], dict] = {}
        self.slices: dict[str, dict] = {}
        self.pods: dict[tuple[str, str], dict] = {}
        self.pod_reads = 0
        self.events: list[tuple[str, str]] = []
        self.writes: list[str] = []
        self.reads: list[tuple[str, dict | None]] = []  # (path, query) of every GET
        self.down = False
        self._rv = 0
        self.status_patches: list[tuple[str, dict, dict]] = []  # (path, query, body) of status writes
        self.status_down = False  # status writes fail (403) while true
        self.quotas: dict[str, list[dict]] = {}  # namespace -> ResourceQuotas
        self.configmaps: dict[tuple[str, str], dict] = {}
        self.nodes_gone: set[str] = set()
        self.after_ledger_read = None  # called once after the next authoritative read of a ConfigMap
        self.conflicts = 0  # the next configmap replaces that fail with 409, as after another driver's
        self.drop_taints = False  # as an API server without DRADeviceTaints: device taints are not stored
        self.dry_runs = 0

    def add_ledger(self, namespace: str, name: str) -> None:
        self._rv += 1
        self.configmaps[(namespace, name)] = {"metadata": {"name": name, "namespace": namespace,
                                                           "labels": {"app.kubernetes.io/managed-by": "Helm"},
                                                           "resourceVersion": str(self._rv)}}

    def add_claim(self, claim: dict) -> None:
        meta = claim["metadata"]
        self.claims[(meta["namespace"], meta["name"])] = copy.deepcopy(claim)

    def get_pod(self, namespace: str, name: str) -> dict:
        self._check()
        self.pod_reads += 1
        if (namespace, name) not in self.pods:
            raise NotFoundError(404, "NotFound", f"pods {name} not found")
        return copy.deepcopy(self.pods[(namespace, name)])

    def get_node(self, name: str) -> dict:
        self._check()
        return copy.deepcopy(self.node)

    def create_event(self, regarding, reason, message, event_type="Normal", component="x"):
        self.events.append((reason, message))

    def _check(self) -> None:
        if self.down:
            raise UnreachableError("API server unreachable (test)")

    def request(self, method, path, *, query=None, body=None, content_type="application/json", timeout=None):
        self._check()
        if method == "GET":
            self.reads.append((path, query))
        if path == f"/api/v1/nodes/{self.node['metadata']['name']}" and method == "GET":
            return copy.deepcopy(self.node)
        if path.startswith("/api/v1/nodes/") and method == "GET":
            name = path.rsplit("/", 1)[1]
            if name in self.nodes_gone:
                raise NotFoundError(404, "NotFound", f"nodes {name} not found")
            return {"metadata": {"name": name}}
        if path.endswith("/resourcequotas") and method == "GET":
            return {"items": copy.deepcopy(self.quotas.get(path.split("/")[4], []))}
        if "/configmaps/" in path:
            parts = path.split("/")
            key = (parts[4], parts[6])
            if key not in self.configmaps:
                raise NotFoundError(404, "NotFound", f"configmaps {key[1]} not found")
            if method == "GET":
                found = copy.deepcopy(self.configmaps[key])
                hook, self.after_ledger_read = self.after_ledger_read, None
                if hook is not None and query is None:  # what another driver does between a read and a replace
                    hook()
                return found
            assert method == "PUT"
            if self.conflicts:
                self.conflicts -= 1
                raise ConflictError(409, "Conflict", "the object has been modified")
            if body["metadata"].get("resourceVersion") != self.configmaps[key]["metadata"]["resourceVersion"]:
                raise ConflictError(409, "Conflict", "the object has been modified")
            self._rv += 1
            stored = copy.deepcopy(body)
            stored["metadata"]["resourceVersion"] = str(self._rv)
            self.configmaps[key] = stored
            return copy.deepcopy(stored)
        if "/resourceclaims/" in path and path.endswith("/status") and method == "PATCH":
            if self.status_down:
                raise KubeError(403, "Forbidden", "resourceclaims/status is forbidden (test)")
            self.status_patches.append((path, dict(query or {}), copy.deepcopy(body)))
            parts = path.split("/")
            key = (parts[parts.index("namespaces") + 1], parts[-2])
            if key not in self.claims:
                raise NotFoundError(404, "NotFound", f"resourceclaims {key[1]} not found")
            self.claims[key].setdefault("status", {})["devices"] = copy.deepcopy(body["status"]["devices"])
            return copy.deepcopy(self.claims[key])
        if "/resourceclaims/" in path:
            parts = path.split("/")
            key = (parts[parts.index("namespaces") + 1], parts[-1])
            if key not in self.claims:
                raise NotFoundError(404, "NotFound", f"resourceclaims {key[1]} not found")
            return copy.deepcopy(self.claims[key])
        if path.startswith(SLICES):
            name = path.removeprefix(SLICES).strip("/")
            if method != "GET":
                self.writes.append(method)
            if method == "GET":
                if name not in self.slices:
                    raise NotFoundError(404, "NotFound", f"resourceslices {name} not found")
                return copy.deepcopy(self.slices[name])
            if method == "DELETE":
                if self.slices.pop(name, None) is None:
                    raise NotFoundError(404, "NotFound", name)
                return {}
            obj = copy.deepcopy(body)
            name = obj["metadata"]["name"]
            if method == "POST" and name in self.slices:
                raise ConflictError(409, "AlreadyExists", name)
            if method == "PUT" and obj["metadata"].get("resourceVersion") != self.slices[name]["metadata"][
                    "resourceVersion"]:
                raise ConflictError(409, "Conflict", "stale resourceVersion")
            if self.drop_taints:
                for device in obj["spec"].get("devices") or []:
                    device.pop("taints", None)
            if (query or {}).get("dryRun") == "All":
                self.dry_runs += 1
                return obj
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self.slices[name] = obj
            return copy.deepcopy(obj)
        raise KubeError(404, "NotFound", f"fake has no {method} {path}")
