"""What kube-apiserver's per-resource strategies do to an object on create and update,
for the fields our components and harness read (defaulting, status vs main resource)."""

from __future__ import annotations

from hami_dcu.cli.localcluster.apiserver.resources import JSON

# Resources with a status subresource: a write to the main resource keeps the stored
# status, and a write to /status changes nothing but the status.
HAS_STATUS = frozenset({"pods", "nodes", "namespaces"})
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _metadata(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


_DECIMAL_SUFFIXES = ("", "k", "M", "G", "T", "P", "E")


def canonical_quantity(value: object) -> object:
    """A whole decimal quantity as kube-apiserver stores it: "2000" and 2000 become "2k",
    "1500" stays. Webhooks and the extender see pods in this form, never as written."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return value
    text = str(value)
    if not text.isdigit() or len(text) > 30:
        return value  # suffixed, fractional, negative: left as written (we never send those)
    number, exponent = int(text), 0
    while number and number % 1000 == 0 and exponent < len(_DECIMAL_SUFFIXES) - 1:
        number //= 1000
        exponent += 1
    return f"{number}{_DECIMAL_SUFFIXES[exponent]}"


def default_pod(pod: JSON) -> None:
    """API-server defaulting, for the fields we read. Runs before admission and again after
    it, like the decode of a webhook-patched object. An explicit status is kept, unlike
    kube (which resets it to Pending): harness and tests create pods already Running."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        spec = pod["spec"] = {}
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    for container in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
        resources = container.get("resources") if isinstance(container, dict) else None
        for section in ("limits", "requests"):
            values = resources.get(section) if isinstance(resources, dict) else None
            if isinstance(values, dict):
                for name, value in values.items():
                    values[name] = canonical_quantity(value)
    status = pod.get("status")
    if not isinstance(status, dict):
        status = pod["status"] = {}
    status.setdefault("phase", "Pending")


def _label_namespace(namespace: JSON) -> None:
    # kube-apiserver forces this label so namespaceSelectors can match a name.
    meta = _metadata(namespace)
    labels = meta.get("labels")
    if not isinstance(labels, dict):
        labels = meta["labels"] = {}
    labels[NAMESPACE_NAME_LABEL] = meta.get("name", "")


def prepare_create(resource: str, obj: JSON) -> None:
    """Defaulting before admission and storage, in place."""
    if resource == "pods":
        default_pod(obj)
    elif resource == "namespaces":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")
        _label_namespace(obj)


def prepare_update(resource: str, subresource: str | None, old: JSON, new: JSON) -> JSON:
    """The object to store when `new` is written over `old` through the main resource
    (subresource None) or `/status`. Identity fields are the store's business."""
    if subresource == "status":
        result = dict(old)
        if "status" in new:
            result["status"] = new["status"]
        else:
            result.pop("status", None)
        result["metadata"] = dict(old.get("metadata") or {})
        return result
    if resource in HAS_STATUS:
        new = dict(new)
        if "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)
    if resource == "namespaces":
        new["metadata"] = dict(new.get("metadata") or {})
        _label_namespace(new)
    return new
