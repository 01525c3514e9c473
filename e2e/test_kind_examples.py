"""Every manifest in examples/, applied with `kubectl apply` on the kind suite's cluster and
watched until it does what its comments say: runs, on the cards it asked for, or is refused
where refusal is the example's point (the namespace quota).

The files are applied as a user applies them with three changes, made on the parsed YAML: the
image becomes the kind nodes' preloaded busybox (`hami-dcu-e2e/busybox:1`, `imagePullPolicy:
IfNotPresent`: the nodes pull from no registry), pods get `terminationGracePeriodSeconds: 1`
(so cleaning up between tests is quick), and card-uuid.yaml's placeholder card ids become ids of
the kind workers' mock cards. In Volcano mode, Volcano's placement is played by the protocol
stand-in (e2e/volcano_standin.py), as in e2e/test_kind_volcano.py.

Each file needs an entry in EXAMPLES: a new example without one fails
`test_every_example_has_a_check`, and an entry without its file fails likewise.

    pytest -m kind e2e/test_kind_examples.py
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.kindcluster import WORKERS, KindBackend
from e2e.scenarios import allocation, card_of, wait_running, wait_until
from e2e.volcano_scenarios import SERVED, outcome, place_together, the_node, volcano
from hami_dcu.cli.localcluster.pods import POD_IMAGE
from hami_dcu.common.io.kube import KubeError, NotFoundError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice

JSON = dict[str, Any]
EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
# card-uuid.yaml's placeholders, and the kind card each stands for: (worker index, card index).
CARD_PLACEHOLDERS = {"DCU-REPLACE-WITH-A-CARD-ID": (0, 1), "DCU-REPLACE-WITH-ANOTHER-CARD-ID": (1, 0)}
MODE_ORDER = ("devicePlugin", "dra", "volcano")  # fewest reinstalls of the chart


# --- applying a file as a user does ------------------------------------------------------------


def load(name: str) -> list[JSON]:
    return [doc for doc in yaml.safe_load_all((EXAMPLES_DIR / name).read_text()) if doc]


def pod_specs(doc: JSON) -> list[JSON]:
    if doc["kind"] == "Pod":
        return [doc["spec"]]
    if doc["kind"] == "Job":
        return [doc["spec"]["template"]["spec"]]
    return []


def for_kind(b: KindBackend, doc: JSON) -> JSON:
    """The document as the kind cluster can run it (the module's docstring says what changes)."""
    doc = copy.deepcopy(doc)
    for spec in pod_specs(doc):
        spec["terminationGracePeriodSeconds"] = 1
        for container in spec.get("initContainers", []) + spec["containers"]:
            container["image"], container["imagePullPolicy"] = POD_IMAGE, "IfNotPresent"
    annotations = (doc.get("metadata") or {}).get("annotations") or {}
    for key, value in annotations.items():
        if value in CARD_PLACEHOLDERS:
            worker, index = CARD_PLACEHOLDERS[value]
            annotations[key] = b.cards[WORKERS[worker]][index].id
    return doc


def kubectl_with(b: KindBackend, docs: list[JSON], *args: str) -> str:
    """kubectl with `-f` a file of these documents, in the suite's namespace."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as manifest:
        yaml.safe_dump_all(docs, manifest)
        manifest.flush()
        return b.kubectl(*args, "-n", b.namespace, "-f", manifest.name, timeout=180)


def apply(b: KindBackend, doc: JSON) -> None:
    kubectl_with(b, [doc], "apply")


def refusal(b: KindBackend, doc: JSON) -> str:
    """What `kubectl apply` says when the API server refuses the document (fails if it is accepted)."""
    try:
        apply(b, doc)
    except RuntimeError as err:
        return str(err)
    raise AssertionError(f"{doc['kind']} {doc['metadata']['name']} was accepted")


def delete(b: KindBackend, docs: list[JSON]) -> None:
    kubectl_with(b, docs, "delete", "--ignore-not-found", "--grace-period=1", "--cascade=foreground", "--wait=true")


def pod(b: KindBackend, name: str) -> JSON:
    return b.kube.get_pod(b.namespace, name)


def cards_of(p: JSON, naming: keys.Naming = keys.DCU_NAMING) -> list[ContainerDevice]:
    return [device for container in allocation(p, naming) for device in container]


def mib_inside(b: KindBackend, name: str) -> str:
    return b.vdev_conf_inside(name)["mem"][0]


# --- what each example must do ---------------------------------------------------------------------


def share(b: KindBackend, docs: list[JSON]) -> None:
    for doc in docs:
        apply(b, doc)
    wait_running(b, "dcu-share", timeout=120)
    assert mib_inside(b, "dcu-share") == "2000 MiB"
    (device,) = cards_of(pod(b, "dcu-share"))
    assert (device.usedmem, device.usedcores) == (2000, 15)


def two_pods_one_card(b: KindBackend, docs: list[JSON]) -> None:
    for doc in docs:
        apply(b, doc)

    def both_running() -> list[JSON] | None:
        pods = b.kube.list_pods(namespace=b.namespace, label_selector="job-name=two-on-one-card").items
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return running if len(running) == 2 else None

    pods = wait_until("the Job's two pods Running", both_running, timeout=120, interval=0.5)
    first, second = (cards_of(p) for p in pods)
    assert len(first) == len(second) == 1
    assert first[0].uuid == second[0].uuid, f"the two pods are on {first[0].uuid} and {second[0].uuid}"
    assert pods[0]["spec"]["nodeName"] == pods[1]["spec"]["nodeName"]


def render_nodes(b: KindBackend, name: str) -> list[str]:
    return [d for d in b.pod_exec(name, "ls", "/dev/dri").split() if d.startswith("renderD")]


def assert_whole_cards_only(b: KindBackend, running: JSON, count: int) -> None:
    """`count` distinct cards, all of each, the container sees their device nodes and no vDCU."""
    devices = cards_of(running)
    assert len({d.uuid for d in devices}) == count == len(devices), devices
    for device in devices:
        card = card_of(b, running["spec"]["nodeName"], device.uuid)
        assert (device.usedmem, device.usedcores) == (card.memory_mib, 100), device
    name = running["metadata"]["name"]
    assert len(render_nodes(b, name)) == count
    assert "kfd" in b.pod_exec(name, "ls", "/dev")
    uid = running["metadata"]["uid"]
    assert not [d for d in b.vdev_files(running["spec"]["nodeName"]) if d.startswith(uid)], "a whole card got a vDCU"


def whole_card(b: KindBackend, docs: list[JSON]) -> None:
    for doc in docs:
        apply(b, doc)
    assert_whole_cards_only(b, wait_running(b, "dcu-whole-card", timeout=120), 1)


def several_cards(b: KindBackend, docs: list[JSON]) -> None:
    for doc in docs:
        apply(b, doc)
    assert_whole_cards_only(b, wait_running(b, "dcu-two-cards", timeout=120), 2)


def card_type(b: KindBackend, docs: list[JSON]) -> None:
    for doc in docs:
        apply(b, doc)
    running = wait_running(b, "dcu-k100-only", timeout=120)
    (device,) = cards_of(running)
    assert card_of(b, running["spec"]["nodeName"], device.uuid).model == "K100_AI"
    # The selection holds: a pod whose model list matches no card stays Pending.
    other = copy.deepcopy(docs[0])
    other["metadata"] = {"name": "dcu-no-such-model", "annotations": {keys.DCU_NAMING.use_type: "Z100"}}
    apply(b, other)
    try:
        def unschedulable() -> bool:
            conditions = (pod(b, "dcu-no-such-model").get("status") or {}).get("conditions") or []
            return any(c.get("reason") == "Unschedulable" for c in conditions)

        wait_until("a pod asking only for Z100 cards unschedulable", unschedulable, timeout=60, interval=0.5)
        assert not (pod(b, "dcu-no-such-model")["spec"].get("nodeName"))
    finally:
        delete(b, [other])


def card_uuid(b: KindBackend, docs: list[JSON]) -> None:
    wanted = b.cards[WORKERS[0]][1]
    avoided = b.cards[WORKERS[1]][0]
    for doc in docs:
        apply(b, doc)
    on_it = wait_running(b, "dcu-on-this-card", timeout=120)
    assert [d.uuid for d in cards_of(on_it)] == [wanted.id] and on_it["spec"]["nodeName"] == WORKERS[0]
    not_it = wait_running(b, "dcu-not-that-card", timeout=120)
    assert [d.uuid for d in cards_of(not_it)] != [avoided.id]


def exclusive_card(b: KindBackend, docs: list[JSON]) -> None:
    for doc in docs:
        apply(b, doc)
    running = wait_running(b, "dcu-exclusive", timeout=120)
    (device,) = cards_of(running)
    assert (device.usedmem, device.usedcores) == (16000, 100)
    # No other share fits beside it: a pod asking for that card stays Pending.
    beside = {"apiVersion": "v1", "kind": "Pod", "spec": copy.deepcopy(docs[0]["spec"]),
              "metadata": {"name": "dcu-beside-exclusive", "annotations": {keys.USE_DCU_UUID: device.uuid}}}
    beside["spec"]["containers"][0]["resources"]["limits"] = {"hygon.com/dcunum": 1, "hygon.com/dcumem": 1000,
                                                             "hygon.com/dcucores": 10}
    apply(b, beside)
    try:
        def unschedulable() -> bool:
            conditions = (pod(b, "dcu-beside-exclusive").get("status") or {}).get("conditions") or []
            return any(c.get("reason") == "Unschedulable" for c in conditions)

        wait_until("a share on the exclusive pod's card unschedulable", unschedulable, timeout=60, interval=0.5)
    finally:
        delete(b, [beside])


def per_pod_policy(b: KindBackend, docs: list[JSON]) -> None:
    for doc in docs:
        apply(b, doc)
    (device,) = cards_of(wait_running(b, "dcu-policy", timeout=120))
    assert (device.usedmem, device.usedcores) == (2000, 20)


def dra_claim(b: KindBackend, docs: list[JSON]) -> None:
    for doc in docs:
        apply(b, doc)
    wait_running(b, "dcu-claim", timeout=120)
    conf = b.vdev_conf_inside("dcu-claim")
    assert conf["cu_count"] == ["30"] and conf["mem"] == ["8192 MiB"], conf


def volcano_pod(b: KindBackend, docs: list[JSON]) -> None:
    for doc in docs:
        apply(b, doc)
    created = pod(b, "dcu-volcano")
    assert created["spec"]["schedulerName"] == "volcano", "the webhook took the pod from Volcano"
    place_together(b, volcano(b), [created], the_node(b))
    assert outcome(b, "dcu-volcano") == SERVED
    assert mib_inside(b, "dcu-volcano") == "2000 MiB"


def namespace_quota(b: KindBackend, docs: list[JSON]) -> None:
    quota, within, over = docs
    apply(b, quota)
    # The extender's watch brings the quota to the webhook: a dry run of the second pod at
    # 5000 MiB (more than the whole quota) tells when.
    probe = copy.deepcopy(over)
    probe["spec"]["containers"][0]["resources"]["limits"]["hygon.com/dcumem"] = "5000"

    def quota_seen() -> bool:
        try:
            b.kube.request("POST", f"/api/v1/namespaces/{b.namespace}/pods", query={"dryRun": "All"}, body=probe)
        except KubeError as err:
            return "quota" in str(err).lower()
        return False

    wait_until("the webhook sees the quota", quota_seen, timeout=60, interval=0.5)
    apply(b, within)
    wait_running(b, "dcu-within-quota", timeout=120)
    message = refusal(b, over)
    assert f"exceeds the DCU quota of namespace {b.namespace}" in message, message
    with pytest.raises(NotFoundError):
        pod(b, "dcu-over-quota")


@dataclass(frozen=True)
class Example:
    mode: str  # the chart's mode the example is written for (KindBackend.ensure_mode)
    check: Callable[[KindBackend, list[JSON]], None]


EXAMPLES: dict[str, Example] = {
    "share.yaml": Example("devicePlugin", share),
    "two-pods-one-card.yaml": Example("devicePlugin", two_pods_one_card),
    "whole-card.yaml": Example("devicePlugin", whole_card),
    "several-cards.yaml": Example("devicePlugin", several_cards),
    "card-type.yaml": Example("devicePlugin", card_type),
    "card-uuid.yaml": Example("devicePlugin", card_uuid),
    "exclusive-card.yaml": Example("devicePlugin", exclusive_card),
    "per-pod-policy.yaml": Example("devicePlugin", per_pod_policy),
    "namespace-quota.yaml": Example("devicePlugin", namespace_quota),
    "dra-claim.yaml": Example("dra", dra_claim),
    "volcano-pod.yaml": Example("volcano", volcano_pod),
}


def example_files() -> list[str]:
    return sorted(p.name for p in EXAMPLES_DIR.glob("*.yaml"))


def in_mode_order(names: list[str]) -> list[str]:
    def rank(name: str) -> tuple[int, str]:
        example = EXAMPLES.get(name)
        return (MODE_ORDER.index(example.mode) if example else -1, name)

    return sorted(names, key=rank)


def test_every_example_has_a_check() -> None:
    """Not marked kind: the fast suite holds the table and the directory in agreement."""
    files = set(example_files())
    assert files - set(EXAMPLES) == set(), f"examples without a check in EXAMPLES: {sorted(files - set(EXAMPLES))}"
    assert set(EXAMPLES) - files == set(), f"checks without an example file: {sorted(set(EXAMPLES) - files)}"
    for name in files:
        docs = load(name)
        assert docs, f"{name} is empty"
        for doc in docs:
            for spec in pod_specs(doc):
                images = [c["image"] for c in spec["containers"]]
                assert POD_IMAGE not in images, f"{name}: a user's example names the kind suite's image"


@pytest.mark.kind
@pytest.mark.parametrize("name", in_mode_order(example_files()))
def test_example_on_kind(kind: KindBackend, name: str) -> None:
    example = EXAMPLES.get(name)
    assert example is not None, f"{name} has no entry in EXAMPLES"
    kind.ensure_mode(example.mode)
    if example.mode == "dra":
        kind.clean_claims()
    else:
        kind.clean()
    docs = [for_kind(kind, doc) for doc in load(name)]
    try:
        example.check(kind, docs)
    finally:
        delete(kind, docs)
