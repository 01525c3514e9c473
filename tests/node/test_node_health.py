"""Card health from SMI and the device nodes: what the kubelet and the node registration see."""

from dataclasses import replace

import pytest

from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.node.discovery import discover
from hami_dcu.node.faketree import lay_out
from hami_dcu.node.health import (
    DEVICE_NODE_MISSING,
    KFD_MISSING,
    MOVED,
    NOT_REPORTED,
    SMI_FAILING,
    SMI_UNHEALTHY,
    Problem,
    SmiHealth,
    card_health,
    card_problems,
)
from hami_dcu.node.smi import Card, SmiError

CARDS = [
    Card(0, "S1", "K100_AI", 65520, 120, "0000:3D:00.0"),
    Card(1, "S2", "K100_AI", 65520, 120, "0000:9F:00.0"),
]


def served(tmp_path):
    lay_out(CARDS, tmp_path / "sys", tmp_path / "dev")
    return discover(CARDS, tmp_path / "sys", tmp_path / "dev", DCU_NAMING)


def test_all_present_and_healthy(tmp_path):
    assert card_health(served(tmp_path), CARDS, tmp_path / "dev") == {"DCU-S1": True, "DCU-S2": True}


def test_a_card_smi_no_longer_reports_is_unhealthy_not_silently_healthy(tmp_path):
    assert card_health(served(tmp_path), CARDS[:1], tmp_path / "dev") == {"DCU-S1": True, "DCU-S2": False}


def test_smi_unhealthy_or_moved_card(tmp_path):
    cards = served(tmp_path)
    now = [replace(CARDS[0], healthy=False), replace(CARDS[1], pci_bus_id="0000:AA:00.0")]
    assert card_health(cards, now, tmp_path / "dev") == {"DCU-S1": False, "DCU-S2": False}


def test_missing_device_nodes(tmp_path):
    cards = served(tmp_path)
    (tmp_path / "dev" / "dri" / "renderD129").unlink()
    assert card_health(cards, CARDS, tmp_path / "dev") == {"DCU-S1": True, "DCU-S2": False}
    (tmp_path / "dev" / "kfd").unlink()
    assert card_health(cards, CARDS, tmp_path / "dev") == {"DCU-S1": False, "DCU-S2": False}


def test_smi_that_keeps_failing_marks_every_card_unhealthy(tmp_path):
    class Flaky:
        def __init__(self):
            self.answers = []

        def cards(self):
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    backend = Flaky()
    health = SmiHealth(backend, served(tmp_path), tmp_path / "dev", failures_before_unhealthy=3)
    backend.answers = [CARDS, SmiError("x"), SmiError("x"), CARDS, SmiError("x"), SmiError("x"), SmiError("x")]
    assert health() == {"DCU-S1": True, "DCU-S2": True}
    for _ in range(2):  # the server keeps the last answer on an error
        with pytest.raises(SmiError):
            health()
    assert health() == {"DCU-S1": True, "DCU-S2": True}  # a success resets the count
    for _ in range(2):
        with pytest.raises(SmiError):
            health()
    assert health() == {"DCU-S1": False, "DCU-S2": False}


def test_each_problem_says_why_with_a_reason_a_device_taint_can_carry(tmp_path):
    cards = served(tmp_path)
    reasons = {k: p and p.reason for k, p in card_problems(cards, CARDS[:1], tmp_path / "dev").items()}
    assert reasons == {"DCU-S1": None, "DCU-S2": NOT_REPORTED}
    now = [replace(CARDS[0], healthy=False), replace(CARDS[1], pci_bus_id="0000:AA:00.0")]
    problems = card_problems(cards, now, tmp_path / "dev")
    assert problems["DCU-S1"] == Problem(SMI_UNHEALTHY, "reported unhealthy by SMI")
    assert problems["DCU-S2"] is not None and problems["DCU-S2"].reason == MOVED
    assert "0000:AA:00.0" in problems["DCU-S2"].message
    (tmp_path / "dev" / "dri" / "renderD129").unlink()
    assert card_problems(cards, CARDS, tmp_path / "dev")["DCU-S2"].reason == DEVICE_NODE_MISSING
    (tmp_path / "dev" / "kfd").unlink()
    assert {p.reason for p in card_problems(cards, CARDS, tmp_path / "dev").values()} == {KFD_MISSING}


def test_a_failing_smi_is_the_reason_and_the_same_each_time(tmp_path):
    class Broken:
        def cards(self):
            raise SmiError("rsmi_init failed")

    health = SmiHealth(Broken(), served(tmp_path), tmp_path / "dev", failures_before_unhealthy=1)
    first, second = health.problems(), health.problems()
    assert first == second  # an unchanged answer: nothing republished every second
    assert {p.reason for p in first.values()} == {SMI_FAILING}
