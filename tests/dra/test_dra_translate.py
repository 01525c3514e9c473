"""HAMi-style requests as claims: the templates and the pod patch."""

import jsonpatch
import pytest

from hami_dcu.common.protocol.dra.translate import TranslateError, compute_units, pod_claim_name, translate
from hami_dcu.common.protocol.requests import RequestError


def pod(*containers, claims=None):
    spec = {"containers": list(containers)}
    if claims:
        spec["resourceClaims"] = claims
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


def container(name="main", limits=None, requests=None):
    resources = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "image": "app", "resources": resources}


def applied(original, translation):
    return jsonpatch.apply_patch(original, translation.patch)


def test_a_share_becomes_a_template_and_a_pod_claim():
    original = pod(container(limits={"hygon.com/dcunum": "1", "hygon.com/dcumem": "2k", "hygon.com/dcucores": "25",
                                     "cpu": "1"}))
    translation = translate(original, unit_counts=(120,))
    [template] = translation.templates
    name = template["metadata"]["name"]
    assert name.startswith("hami-dcu-") and len(name) <= 63
    [request] = template["spec"]["spec"]["devices"]["requests"]
    exactly = request["exactly"]
    assert exactly["deviceClassName"] == "dra.hygon.com" and exactly["count"] == 1
    assert exactly["capacity"]["requests"] == {"memory": "2000Mi", "cores": "30"}
    assert exactly["selectors"] == [{"cel": {"expression":
                                             'device.capacity["dra.hygon.com"].cores.compareTo(quantity("120")) == 0'}}]
    result = applied(original, translation)
    assert result["spec"]["resourceClaims"] == [{"name": "dcu-main", "resourceClaimTemplateName": name}]
    assert result["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "1"}, "claims": [{"name": "dcu-main"}]}


def test_several_card_sizes_become_first_available_subrequests_smallest_first():
    translation = translate(pod(container(limits={"hygon.com/dcunum": 1, "hygon.com/dcucores": 50})), (120, 60, 120))
    [request] = translation.templates[0]["spec"]["spec"]["devices"]["requests"]
    subs = request["firstAvailable"]
    assert [s["name"] for s in subs] == ["cu60", "cu120"]
    assert [s["capacity"]["requests"] for s in subs] == [{"cores": "30"}, {"cores": "60"}]
    assert "quantity(\"60\")" in subs[0]["selectors"][0]["cel"]["expression"]


def test_whole_cards_ask_no_capacity():
    translation = translate(pod(container(limits={"hygon.com/dcunum": "2"})), ())
    [request] = translation.templates[0]["spec"]["spec"]["devices"]["requests"]
    assert request == {"name": "dcu", "exactly": {"deviceClassName": "dra.hygon.com", "allocationMode": "ExactCount",
                                                  "count": 2}}


def test_memory_only_needs_no_card_size():
    translation = translate(pod(container(limits={"hygon.com/dcunum": "1", "hygon.com/dcumem": "4096"})), ())
    [request] = translation.templates[0]["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"] == {"requests": {"memory": "4096Mi"}}


def test_the_hcu_naming_set_and_requests_work_too():
    original = pod(container(requests={"hygon.com/hcunum": "1", "hygon.com/hcucores": "10"}))
    translation = translate(original, (60,))
    [request] = translation.templates[0]["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"]["requests"] == {"cores": "6"}
    assert "requests" not in applied(original, translation)["spec"]["containers"][0]["resources"]


def test_same_shape_same_template_other_shape_other_template():
    share = {"hygon.com/dcunum": "1", "hygon.com/dcucores": "25"}
    a = translate(pod(container("a", limits=share), container("b", limits=dict(share))), (120,))
    assert len(a.templates) == 1
    result = applied(pod(container("a", limits=share), container("b", limits=dict(share))), a)
    assert [c["name"] for c in result["spec"]["resourceClaims"]] == ["dcu-a", "dcu-b"]  # one claim each
    b = translate(pod(container(limits={**share, "hygon.com/dcucores": "26"})), (120,))
    assert b.templates[0]["metadata"]["name"] != a.templates[0]["metadata"]["name"]
    assert translate(pod(container(limits=share)), (120,)).templates == a.templates


def test_pods_with_claims_or_without_dcu_are_left_alone():
    assert translate(pod(container(limits={"hygon.com/dcunum": "1"}), claims=[{"name": "x"}]), (120,)).patch == []
    assert translate(pod(container(limits={"cpu": "1"})), (120,)).patch == []
    zero = pod(container(limits={"hygon.com/dcunum": "0", "cpu": "1"}))
    translation = translate(zero, (120,))
    assert not translation.templates and translation.patch == []


def test_what_cannot_be_written_as_a_claim_is_refused():
    with pytest.raises(TranslateError, match="no DCU is published"):
        translate(pod(container(limits={"hygon.com/dcunum": "1", "hygon.com/dcucores": "25"})), ())
    with pytest.raises(TranslateError, match="a shared vDCU is one card"):
        translate(pod(container(limits={"hygon.com/dcunum": "2", "hygon.com/dcumem": "100"})), (120,))
    with pytest.raises(TranslateError, match="two naming sets"):
        translate(pod(container(limits={"hygon.com/dcunum": "1", "hygon.com/hcumem": "100"})), (120,))
    with pytest.raises(RequestError):
        translate(pod(container(limits={"hygon.com/dcumem": "100"})), (120,))


def test_compute_units_round_up_and_never_reach_zero():
    assert compute_units(25, 120) == 30 and compute_units(1, 60) == 1 and compute_units(0, 120) == 1
    assert compute_units(33, 60) == 20  # 19.8 rounds up: a share never gets less than asked


def test_pod_claim_names_are_dns_labels():
    long = "c" * 63
    assert len(pod_claim_name(long)) == 63 and pod_claim_name(long) != pod_claim_name("c" * 62 + "d")
