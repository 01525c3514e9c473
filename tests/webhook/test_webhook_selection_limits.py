"""Issue 35, finding 8: the webhook refuses a card selection list (`use-<set>type`,
`nouse-<set>type` of either naming set, `use-gpuuuid`, `nouse-gpuuuid`) longer than the
extender reads, naming the annotation, the limit and the count. Before, a 240 KiB
`use-hcutype` was admitted and cost the extender 0.4 s of CPU per scheduling attempt."""

import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.preferences import SELECTION_MAX_ENTRIES, SELECTION_MAX_ENTRY_CHARS
from hami_dcu.webhook.decision import DRA, Settings, review

KEYS = [keys.DCU_NAMING.use_type, keys.DCU_NAMING.nouse_type, keys.HCU_NAMING.use_type,
        keys.HCU_NAMING.nouse_type, keys.USE_DCU_UUID, keys.NOUSE_DCU_UUID]
DCU_SETTINGS = Settings(naming=keys.DCU_NAMING)
SETTINGS = {"dcu": DCU_SETTINGS, "hcu": Settings(naming=keys.HCU_NAMING),
            "dra": Settings(naming=keys.DCU_NAMING, mode=DRA, card_units=(120,)),
            "volcano": Settings(naming=keys.HCU_NAMING, volcano_scheduler="volcano")}


def pod(annotations: dict[str, str], settings: Settings) -> dict:
    count = settings.naming.resources.count
    return {"metadata": {"name": "p", "namespace": "default", "annotations": annotations},
            "spec": {"schedulerName": "volcano" if settings.volcano_scheduler else "default-scheduler",
                     "containers": [{"name": "c", "image": "x", "resources": {"limits": {count: "1"}}}]}}


def entries(count: int, chars: int = 8) -> str:
    return ",".join(f"{i:0{chars}d}"[-chars:] for i in range(count))


@pytest.mark.parametrize("mode", SETTINGS)
@pytest.mark.parametrize("key", KEYS)
def test_too_many_entries_are_refused_at_admission(key, mode):
    settings = SETTINGS[mode]
    decision = review(pod({key: entries(3000)}, settings), settings)
    assert not decision.allowed and decision.reason == "selection-too-long"
    assert f"annotation {key} lists 3000 entries" in decision.message
    assert f"at most {SELECTION_MAX_ENTRIES}" in decision.message


@pytest.mark.parametrize("key", KEYS)
def test_a_too_long_entry_is_refused_at_admission(key):
    decision = review(pod({key: "K100," + "y" * 240 * 1024}, DCU_SETTINGS), DCU_SETTINGS)
    assert not decision.allowed and decision.reason == "selection-too-long"
    assert f"annotation {key}" in decision.message and f"{240 * 1024 + 0} characters" in decision.message
    assert f"at most {SELECTION_MAX_ENTRY_CHARS}" in decision.message
    assert len(decision.message) < 400  # the value is not echoed back


@pytest.mark.parametrize("key", KEYS)
def test_lists_at_the_limits_are_admitted(key):
    decision = review(pod({key: entries(SELECTION_MAX_ENTRIES, SELECTION_MAX_ENTRY_CHARS)}, DCU_SETTINGS), DCU_SETTINGS)
    assert decision.allowed, decision.message


def test_a_pod_asking_for_no_dcu_is_not_judged_on_its_selection():
    """Nothing of hami-dcu reads its annotations: it passes untouched, as every such pod."""
    plain = pod({keys.USE_DCU_UUID: entries(3000)}, DCU_SETTINGS)
    plain["spec"]["containers"][0]["resources"] = {}
    assert review(plain, DCU_SETTINGS).reason == "no-dcu"
