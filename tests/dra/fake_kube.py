"""A stand-in for the API server's resource.k8s.io objects in unit tests: ResourceClaims,
the ResourceSlice, one Node, events. The real API server is exercised by the e2e suite."""

import copy

from hami_dcu.common.kube import ConflictError, KubeError, NotFoundError, UnreachableError

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
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self.slices[name] = obj
            return copy.deepcopy(obj)
        raise KubeError(404, "NotFound", f"fake has no {method} {path}")
