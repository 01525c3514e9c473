"""Issue 35, finding 8: the card selection lists (`use-<set>type`, `nouse-<set>type`,
`use-gpuuuid`, `nouse-gpuuuid`) are bounded where the extender parses them. A 240 KiB
`use-hcutype` cost 0.4 s of extender CPU per scheduling attempt (every entry matched against
every card of every node), in the process that also serves the webhook. A pod created before
the webhook refused such values (or past it) fails on every node with the annotation named."""

import pytest
from scheduler_helpers import create_nodes, dcu_pod, filter_args, until

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.preferences import SELECTION_MAX_ENTRIES, SELECTION_MAX_ENTRY_CHARS, SelectionError
from hami_dcu.common.protocol.requests import RequestError
from hami_dcu.scheduler.filtering import FilterSettings, plan_pod
from hami_dcu.scheduler.fit import Selection

DCU = keys.DCU_NAMING  # the naming set the service of these tests speaks


def selection_keys(naming: keys.Naming) -> list[str]:
    return [naming.use_type, naming.nouse_type, keys.USE_DCU_UUID, keys.NOUSE_DCU_UUID]


CASES = [(naming, key) for naming in (keys.DCU_NAMING, keys.HCU_NAMING) for key in selection_keys(naming)]
IDS = [f"{naming.name}-{key.split('/')[1]}" for naming, key in CASES]


def entries(count: int, chars: int = 8) -> str:
    return ",".join(f"{i:0{chars}d}"[-chars:] for i in range(count))


@pytest.mark.parametrize(("naming", "key"), CASES, ids=IDS)
def test_a_list_at_the_limits_is_read(naming, key):
    value = entries(SELECTION_MAX_ENTRIES, SELECTION_MAX_ENTRY_CHARS)
    Selection.from_annotations({key: value}, naming)  # no error
    Selection.from_annotations({key: value + ",, ,"}, naming)  # empty entries are not entries


@pytest.mark.parametrize(("naming", "key"), CASES, ids=IDS)
def test_too_many_entries_are_refused_naming_the_annotation_the_limit_and_the_count(naming, key):
    with pytest.raises(SelectionError) as info:
        Selection.from_annotations({key: entries(SELECTION_MAX_ENTRIES + 1)}, naming)
    message = str(info.value)
    assert key in message and f"{SELECTION_MAX_ENTRIES + 1} entries" in message
    assert f"at most {SELECTION_MAX_ENTRIES}" in message


@pytest.mark.parametrize(("naming", "key"), CASES, ids=IDS)
def test_a_too_long_entry_is_refused_naming_the_annotation_the_limit_and_the_length(naming, key):
    with pytest.raises(SelectionError) as info:
        Selection.from_annotations({key: "K100," + "x" * (SELECTION_MAX_ENTRY_CHARS + 1)}, naming)
    message = str(info.value)
    assert key in message and f"{SELECTION_MAX_ENTRY_CHARS + 1} characters" in message
    assert f"at most {SELECTION_MAX_ENTRY_CHARS}" in message
    assert "x" * 50 not in message  # the value is the pod author's: not echoed in full


def test_the_other_sets_type_keys_are_not_read_by_the_parser():
    """The webhook renames them into this set at CREATE (and refuses them oversized there)."""
    Selection.from_annotations({keys.HCU_NAMING.use_type: entries(1000)}, keys.DCU_NAMING)


def test_plan_pod_fails_the_pod_with_the_annotation_named():
    pod = dcu_pod("p", annotations={DCU.use_type: ",".join(["DCU-K100_AI"] * 20_000)})  # 240 KiB
    with pytest.raises(RequestError, match=f"annotation {DCU.use_type} lists 20000 entries"):
        plan_pod(pod, FilterSettings(naming=DCU))


async def test_an_oversized_type_list_fails_every_node_with_the_annotation_named(kube, service, client):
    nodes = ["n0", "n1"]
    create_nodes(kube, nodes)
    await until(lambda: all(service.cache.node(n) is not None for n in nodes))
    # The card model is listed (the pod would fit), 20,000 times over: 240 KiB.
    pod = dcu_pod("p", uid="u-p", annotations={DCU.use_type: ",".join(["DCU-K100_AI"] * 20_000)})
    answer = await (await client.post("/filter", json=filter_args(pod, nodes))).json()
    assert answer["NodeNames"] == [], answer  # before: it fit on n0, every card matched against 20,000 entries
    reason = answer["FailedAndUnresolvableNodes"]["n0"]
    assert f"annotation {DCU.use_type} lists 20000 entries" in reason and len(reason) < 400
    assert service.cache.placements.all() == []
