"""API discovery, so kubectl can talk to the local API server (`hami-dcu demo --keep`).

kubectl first asks which resources exist. Since 1.30 it asks for aggregated discovery
(`/api` and `/apis` answering an `apidiscovery.k8s.io/v2` APIGroupDiscoveryList when the
Accept header names it) and falls back to the legacy documents (APIVersions, APIGroupList,
one APIResourceList per group version). Both are served, built from `resources.KINDS`, so a
resource the server stores is a resource kubectl can name. Pure builders plus the routes.
"""

from __future__ import annotations

from aiohttp import web

from hami_dcu.cli.localcluster.apiserver.resources import CLUSTER_SCOPED, JSON, KINDS, SUBRESOURCES

AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

# What kube-apiserver registers for these resources (kubectl completes and prints with them).
SHORT_NAMES = {"pods": ["po"], "nodes": ["no"], "namespaces": ["ns"], "events": ["ev"], "configmaps": ["cm"]}
CATEGORIES = {"pods": ["all"]}
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "binding": ["create"]}
SUBRESOURCE_KINDS = {"binding": "Binding"}


def group_versions() -> dict[str, list[str]]:
    """group -> the resources it serves ("" is the core group), one version per group."""
    groups: dict[str, list[str]] = {}
    for resource, (_kind, api_version) in KINDS.items():
        groups.setdefault(api_version, []).append(resource)
    return groups


def _split(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def api_versions() -> JSON:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}


def api_group_list() -> JSON:
    groups = []
    for api_version in group_versions():
        group, version = _split(api_version)
        if not group:
            continue
        entry = {"groupVersion": api_version, "version": version}
        groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resource_list(api_version: str) -> JSON | None:
    resources = group_versions().get(api_version)
    if resources is None:
        return None
    listed: list[JSON] = []
    for resource in resources:
        kind = KINDS[resource][0]
        listed.append(_legacy_resource(resource, kind, resource not in CLUSTER_SCOPED))
        for sub in sorted(SUBRESOURCES.get(resource, ())):
            listed.append({"name": f"{resource}/{sub}", "singularName": "", "namespaced": resource not in
                           CLUSTER_SCOPED, "kind": SUBRESOURCE_KINDS.get(sub, kind), "verbs": SUBRESOURCE_VERBS[sub]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api_version, "resources": listed}


def _legacy_resource(resource: str, kind: str, namespaced: bool) -> JSON:
    entry: JSON = {"name": resource, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                   "verbs": VERBS}
    if resource in SHORT_NAMES:
        entry["shortNames"] = SHORT_NAMES[resource]
    if resource in CATEGORIES:
        entry["categories"] = CATEGORIES[resource]
    return entry


def aggregated(core: bool) -> JSON:
    """The v2 APIGroupDiscoveryList of `/api` (core) or `/apis` (every other group)."""
    items = []
    for api_version, resources in group_versions().items():
        group, version = _split(api_version)
        if bool(group) == core:
            continue
        items.append({"metadata": {"name": group}, "versions": [
            {"version": version, "freshness": "Current",
             "resources": [_aggregated_resource(group, version, r) for r in resources]}]})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
            "items": items}


def _aggregated_resource(group: str, version: str, resource: str) -> JSON:
    kind = KINDS[resource][0]
    entry: JSON = {"resource": resource, "responseKind": {"group": group, "version": version, "kind": kind},
                   "scope": "Cluster" if resource in CLUSTER_SCOPED else "Namespaced",
                   "singularResource": kind.lower(), "verbs": VERBS}
    if resource in SHORT_NAMES:
        entry["shortNames"] = SHORT_NAMES[resource]
    if resource in CATEGORIES:
        entry["categories"] = CATEGORIES[resource]
    subresources = [{"subresource": sub, "verbs": SUBRESOURCE_VERBS[sub],
                     "responseKind": {"group": group, "version": version, "kind": SUBRESOURCE_KINDS.get(sub, kind)}}
                    for sub in sorted(SUBRESOURCES.get(resource, ()))]
    if subresources:
        entry["subresources"] = subresources
    return entry


def wants_aggregated(accept: str) -> bool:
    """True when the Accept header offers aggregated discovery v2 (kubectl lists it first,
    then v2beta1, then plain JSON, which gets the legacy documents)."""
    for part in accept.split(","):
        params = dict(p.strip().partition("=")[::2] for p in part.split(";")[1:])
        if params.get("g") == "apidiscovery.k8s.io" and params.get("v") == "v2" \
                and params.get("as") == "APIGroupDiscoveryList":
            return True
    return False


# --- routes -------------------------------------------------------------------------------


async def _root(request: web.Request, core: bool) -> web.Response:
    if wants_aggregated(request.headers.get("Accept", "")):
        response = web.json_response(aggregated(core))
        response.headers["Content-Type"] = AGGREGATED_V2
        return response
    return web.json_response(api_versions() if core else api_group_list())


async def _core(request: web.Request) -> web.Response:
    return await _root(request, core=True)


async def _groups(request: web.Request) -> web.Response:
    return await _root(request, core=False)


async def _core_v1(_request: web.Request) -> web.Response:
    return web.json_response(api_resource_list("v1"))


async def _group_version(request: web.Request) -> web.Response:
    found = api_resource_list(f"{request.match_info['group']}/{request.match_info['version']}")
    if found is None:
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": "the server could not find the requested resource",
                                  "reason": "NotFound", "code": 404}, status=404)
    return web.json_response(found)


def add_discovery_routes(app: web.Application) -> None:
    """Register before the catch-all resource route (routes match in order)."""
    for path, handler in (("/api", _core), ("/apis", _groups), ("/api/v1", _core_v1),
                          ("/apis/{group}/{version}", _group_version)):
        app.router.add_get(path, handler)
        app.router.add_get(path + "/", handler)
