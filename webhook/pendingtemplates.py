"""The templates a rewritten pod waits for (`dcu.hami.io/claim-templates`): their one encoder and
one decoder (pure, no I/O; docs/architecture.md, Wire formats).

A review no caller has proven to be the API server's creates nothing (webhook/callers.py): the
webhook rewrites the pod as always, and the templates it names that do not exist yet travel on
the pod, `{"<name>": <template spec>, ...}`, for the extender to create once its watch shows the
pod stored (webhook/deferredtemplates.py). A forged review stores no pod, so it makes nothing.

The pod's author can write this annotation too, on a pod that never met the webhook. So the
extender creates a template from it only when
* the pod names it (`spec.resourceClaims[].resourceClaimTemplateName`);
* its name is the hash of its spec (common/protocol/dra/translate.py): under that name only that spec is ever
  created, which a template of that name found later must equal anyway (webhook/templatetrust.py);
* its spec has exactly the shape the webhook writes: one request `dcu` of the DeviceClass
  dra.hygon.com, ExactCount, a count, optional `memory`/`cores` capacity, optional card-size
  selectors as common/protocol/dra/translate.py writes them (or `firstAvailable` alternatives of that shape);
  nothing else (no admin access, no config, no other class, no claim metadata).
The worst an author gets is then what a pod of that shape gets through the webhook: a template
in the pod's own namespace, whose claims the namespace DCU quota still judges one by one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any

from hami_dcu.common.protocol import safejson
from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.dra.translate import MAX_SUBREQUESTS, REQUEST, pinned_units, template_name, template_of

JSON = dict[str, Any]
MAX_VALUE = 64 * 1024  # a pod names at most a template per container: a few KiB at most
INT32_MAX = 2**31 - 1
_MEMORY = re.compile(r"[1-9][0-9]{0,9}Mi")
_CORES = re.compile(r"[1-9][0-9]{0,5}")


def encode(templates: list[JSON]) -> str:
    """The annotation's value for `templates` (as common/protocol/dra/translate.py writes them)."""
    return json.dumps({t["metadata"]["name"]: t["spec"] for t in templates}, sort_keys=True,
                      separators=(",", ":"))


def annotation_patch(pod: JSON, templates: list[JSON]) -> JSON:
    """The JSONPatch operation adding the annotation to `pod` (the object under review),
    whatever annotations it has; a value its author wrote under the key is replaced."""
    value = encode(templates)
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict):
        return {"op": "add", "path": "/metadata/annotations", "value": {names.PENDING_TEMPLATES: value}}
    escaped = names.PENDING_TEMPLATES.replace("~", "~0").replace("/", "~1")
    return {"op": "add", "path": f"/metadata/annotations/{escaped}", "value": value}


def decode(value: object, named: Collection[str]) -> tuple[list[JSON], list[str]]:
    """The templates to create for a pod carrying `value`, whose claims name the templates in
    `named`; and, for each entry that is not one, why (for the log)."""
    if not isinstance(value, str) or len(value) > MAX_VALUE:
        return [], [f"{names.PENDING_TEMPLATES} is not a string of at most {MAX_VALUE} characters"]
    try:
        entries = safejson.loads(value.encode())
    except safejson.JsonError as exc:
        return [], [f"{names.PENDING_TEMPLATES} is not JSON: {exc}"]
    if not isinstance(entries, dict):
        return [], [f"{names.PENDING_TEMPLATES} is not a JSON object"]
    made: list[JSON] = []
    problems: list[str] = []
    for name, spec in sorted(entries.items()):
        problem = _entry_problem(name, spec, named)
        if problem is None:
            made.append(template_of(spec))
        else:
            problems.append(f"template {str(name)[:80]!r}: {problem}")
    return made, problems


def _entry_problem(name: str, spec: object, named: Collection[str]) -> str | None:
    if name not in named:
        return "the pod names no such template"
    problem = shape_problem(spec)
    if problem is not None:
        return problem
    assert isinstance(spec, dict)
    if template_name(spec) != name:
        return "its name is not the hash of its spec"
    return None


def shape_problem(spec: object) -> str | None:
    """Why `spec` (a template's spec) is not one the webhook writes, or None."""
    request, problem = _the_one_request(spec)
    if problem is not None:
        return problem
    assert request is not None
    if request.get("name") != REQUEST:
        return f"the request is not named {REQUEST}"
    if set(request) == {"name", "exactly"}:
        return _device_problem(request["exactly"], pinned=False)
    if set(request) != {"name", "firstAvailable"}:
        return "the request is neither exactly nor firstAvailable"
    return _alternatives_problem(request["firstAvailable"])


def _the_one_request(spec: object) -> tuple[JSON | None, str | None]:
    """The one device request of `spec`, each level holding its one key alone; or why not."""
    if not isinstance(spec, dict) or set(spec) != {"spec"}:
        return None, "the spec holds other than the claim's spec"
    claim = spec["spec"]
    if not isinstance(claim, dict) or set(claim) != {"devices"}:
        return None, "the claim's spec holds other than devices"
    devices = claim["devices"]
    if not isinstance(devices, dict) or set(devices) != {"requests"}:
        return None, "devices holds other than requests"
    requests = devices["requests"]
    if not isinstance(requests, list) or len(requests) != 1 or not isinstance(requests[0], dict):
        return None, "not one device request"
    return requests[0], None


def _alternatives_problem(alternatives: object) -> str | None:
    if not isinstance(alternatives, list) or not 1 < len(alternatives) <= MAX_SUBREQUESTS:
        return f"firstAvailable is not 2 to {MAX_SUBREQUESTS} alternatives"
    for alternative in alternatives:
        if not isinstance(alternative, dict):
            return "an alternative is not an object"
        units = pinned_units(alternative.get("selectors"))
        if alternative.get("name") != f"cu{units}":
            return "an alternative is not named after the card size it pins"
        problem = _device_problem({k: v for k, v in alternative.items() if k != "name"}, pinned=True)
        if problem is not None:
            return problem
    return None


_DEVICE_KEYS = {"deviceClassName", "allocationMode", "count", "capacity", "selectors"}


def _device_problem(device: object, pinned: bool) -> str | None:
    if not isinstance(device, dict):
        return "a device request is not an object"
    problem = _device_basics_problem(device, pinned)
    if problem is not None:
        return problem
    if "capacity" not in device:
        return "selectors without capacity" if "selectors" in device else None
    return _capacity_problem(device["capacity"], pinned_size="selectors" in device)


def _device_basics_problem(device: JSON, pinned: bool) -> str | None:
    """Its keys, class, mode, count and card-size selectors: all but its capacity."""
    if not set(device) <= _DEVICE_KEYS:
        return f"a device request holds {', '.join(sorted(set(device) - _DEVICE_KEYS))}"
    if device.get("deviceClassName") != names.DEVICE_CLASS or device.get("allocationMode") != "ExactCount":
        return f"not an ExactCount request of the DeviceClass {names.DEVICE_CLASS}"
    count = device.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= INT32_MAX:
        return "its count is not a positive number"
    if ("selectors" in device or pinned) and pinned_units(device.get("selectors")) is None:
        return "its selectors are not a card size"
    return None


def _capacity_problem(capacity: object, pinned_size: bool) -> str | None:
    if not isinstance(capacity, dict) or set(capacity) != {"requests"}:
        return "its capacity holds other than requests"
    asked = capacity["requests"]
    if not isinstance(asked, dict) or not asked or not set(asked) <= {names.CAP_CORES, names.CAP_MEMORY}:
        return f"its capacity asks other than {names.CAP_CORES} and {names.CAP_MEMORY}"
    memory, cores = asked.get(names.CAP_MEMORY), asked.get(names.CAP_CORES)
    if memory is not None and not (isinstance(memory, str) and _MEMORY.fullmatch(memory)):
        return f"its {names.CAP_MEMORY} is not a number of Mi"
    if cores is not None and not (isinstance(cores, str) and _CORES.fullmatch(cores)):
        return f"its {names.CAP_CORES} is not a number of compute units"
    if cores is not None and not pinned_size:
        # Compute units are a share of one card size: without the size pinned they mean nothing.
        return f"it asks {names.CAP_CORES} without pinning a card size"
    return None
