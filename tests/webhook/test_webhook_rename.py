"""The other naming set's names, renamed at CREATE with a warning (HAMi has no alias)."""

import jsonpatch

from hami_dcu.cli.main import build_parser
from hami_dcu.common.protocol import keys
from hami_dcu.webhook.command import settings_from
from hami_dcu.webhook.decision import Settings, review
from hami_dcu.webhook.rename import adopt_names


def pod(limits: dict[str, str], annotations: dict[str, str] | None = None, scheduler: str = "default-scheduler",
        init_requests: dict[str, str] | None = None) -> dict:
    body = {"metadata": {"name": "p", "namespace": "default", "annotations": dict(annotations or {})},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "main", "resources": {"limits": limits}}]}}
    if init_requests is not None:
        body["spec"]["initContainers"] = [{"name": "setup", "resources": {"requests": init_requests}}]
    return body


def test_an_hcu_pod_on_a_dcu_cluster_is_renamed_and_routed_with_warnings():
    original = pod({"hygon.com/hcunum": "1", "hygon.com/hcumem": "2k", "hygon.com/hcucores": "30"},
                   {"hygon.com/use-hcutype": "K100", "team": "a"}, init_requests={"hygon.com/hcunum": "1"})
    decision = review(original, Settings(naming=keys.DCU_NAMING))
    assert decision.allowed and decision.reason == "routed"
    patched = jsonpatch.apply_patch(original, decision.patch)
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {
        "hygon.com/dcunum": "1", "hygon.com/dcumem": "2k", "hygon.com/dcucores": "30"}
    assert patched["spec"]["initContainers"][0]["resources"]["requests"] == {"hygon.com/dcunum": "1"}
    assert patched["metadata"]["annotations"] == {"hygon.com/use-dcutype": "K100", "team": "a"}
    assert patched["spec"]["schedulerName"] == "hami-scheduler"
    assert original["spec"]["containers"][0]["resources"]["limits"]["hygon.com/hcunum"] == "1"  # input untouched
    assert decision.warnings == [
        "hygon.com/hcunum renamed to hygon.com/dcunum (this cluster speaks the dcu names)",
        "hygon.com/hcumem renamed to hygon.com/dcumem (this cluster speaks the dcu names)",
        "hygon.com/hcucores renamed to hygon.com/dcucores (this cluster speaks the dcu names)",
        "hygon.com/use-hcutype renamed to hygon.com/use-dcutype (this cluster speaks the dcu names)",
    ]
    assert all(len(w) <= 120 for w in decision.warnings)


def test_a_dcu_pod_on_an_hcu_cluster_is_renamed_the_other_way():
    original = pod({"hygon.com/dcunum": "1"}, scheduler="hami-scheduler")
    decision = review(original, Settings(naming=keys.HCU_NAMING))
    assert decision.allowed and decision.reason == "renamed"  # already routed, renamed only
    patched = jsonpatch.apply_patch(original, decision.patch)
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {"hygon.com/hcunum": "1"}
    assert decision.warnings == ["hygon.com/dcunum renamed to hygon.com/hcunum (this cluster speaks the hcu names)"]


def test_a_container_naming_both_sets_is_refused():
    dcu = Settings(naming=keys.DCU_NAMING)
    decision = review(pod({"hygon.com/dcunum": "1", "hygon.com/hcunum": "1"}), dcu)
    assert not decision.allowed and decision.reason == "mixed-naming"
    assert decision.message == "container main limits name both hygon.com/hcunum and hygon.com/dcunum: keep one"
    both = pod({"hygon.com/dcunum": "1"}, {"hygon.com/use-hcutype": "A", "hygon.com/use-dcutype": "B"})
    assert "annotations name both hygon.com/use-hcutype and hygon.com/use-dcutype" in review(both, dcu).message


def test_a_pod_of_this_set_or_without_dcu_is_not_copied():
    for body in (pod({"hygon.com/dcunum": "1"}), pod({"cpu": "1"})):
        adopted = adopt_names(body, keys.DCU_NAMING)
        assert adopted.pod is body and adopted.renames == [] and not adopted.conflict


def test_the_renamed_request_is_judged_as_this_set_names_it():
    decision = review(pod({"hygon.com/hcunum": "2", "hygon.com/hcumem": "1000"}), Settings(naming=keys.DCU_NAMING))
    assert not decision.allowed and decision.reason == "multi-card-sharing"
    assert "hygon.com/dcumem" in decision.message


def test_the_webhook_speaks_the_set_of_its_command_line():
    parser, _ = build_parser()
    hcu = settings_from(parser.parse_args(["webhook", "--tls-cert", "c", "--tls-key", "k", "--naming", "hcu"]))
    assert hcu.naming is keys.HCU_NAMING and hcu.resources == keys.HCU_NAMING.resources
    assert review(pod({"hygon.com/hcunum": "1"}), hcu).reason == "routed"
    dcu = settings_from(parser.parse_args(["webhook", "--tls-cert", "c", "--tls-key", "k"]))
    assert dcu.naming is keys.DCU_NAMING and dcu.resources == keys.DCU_NAMING.resources
    custom = settings_from(parser.parse_args(["webhook", "--tls-cert", "c", "--tls-key", "k", "--naming", "hcu",
                                              "--resource-count", "example.com/cards"]))
    assert custom.resources.all() == ("example.com/cards", "hygon.com/hcumem", "hygon.com/hcucores")
