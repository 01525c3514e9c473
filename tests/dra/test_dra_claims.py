"""Claim -> shares: the pure decision of what each allocated device becomes."""

import pytest
from dra_helpers import DEV0, DEV1, NODE, claim, node_cards, result

from hami_dcu.dra.claims import ClaimRefused, cards_by_device, plan_claim


@pytest.fixture
def cards(tmp_path):
    return cards_by_device(node_cards(tmp_path))


def test_consumed_capacity_becomes_a_vdcu(cards):
    [share] = plan_claim(claim("u", result(cores="30", memory="8Gi", share_id="abc")), NODE, cards)
    assert (share.device, share.request, share.share_id) == (DEV0, "dcu", "abc")
    assert (share.cu_count, share.memory_mib, share.whole) == (30, 8192, False)
    assert share.card.card.serial == "SER0"


def test_no_consumed_capacity_or_all_of_it_is_the_whole_card(cards):
    [plain] = plan_claim(claim("u", result(device=DEV1)), NODE, cards)
    assert plain.whole and (plain.cu_count, plain.memory_mib) == (60, 32752)
    [full] = plan_claim(claim("u", result(device=DEV1, cores="60", memory="32752Mi")), NODE, cards)
    assert full.whole


def test_only_cores_is_a_vdcu_with_all_memory(cards):
    [share] = plan_claim(claim("u", result(cores="12")), NODE, cards)
    assert (share.cu_count, share.memory_mib, share.whole) == (12, 65520, False)


def test_results_of_other_drivers_are_not_ours(cards):
    shares = plan_claim(claim("u", result(driver="gpu.example.com"), result(device=DEV1, request="b")), NODE, cards)
    assert [s.device for s in shares] == [DEV1]
    with pytest.raises(ClaimRefused, match=r"no device of driver dra\.hygon\.com"):
        plan_claim(claim("u", result(driver="gpu.example.com")), NODE, cards)


def test_admin_access_never_makes_a_vdcu(cards):
    admin = {**result(cores="30", memory="1Gi"), "adminAccess": True}
    [share] = plan_claim(claim("u", admin), NODE, cards)
    assert share.whole and share.admin


@pytest.mark.parametrize(("bad", "message"), [
    (result(pool="other-node"), "pool other-node, not this node's"),
    (result(device="hcu-0000-01-00-0"), "not served on node n1"),
    (result(cores="121", memory="1Gi"), "has 120 compute units, 121 consumed"),
    (result(cores="0", memory="1Gi"), "0 consumed"),
    (result(cores="10", memory="70000Mi"), "65520 MiB, 70000 MiB consumed"),
    (result(cores="ten", memory="1Gi"), "not a quantity"),
])
def test_what_this_node_does_not_publish_is_refused(cards, bad, message):
    with pytest.raises(ClaimRefused, match=message):
        plan_claim(claim("u", bad), NODE, cards)


def test_an_unallocated_claim_is_refused(cards):
    with pytest.raises(ClaimRefused, match="ResourceClaim ns/c1 is not allocated"):
        plan_claim(claim("u"), NODE, cards)
