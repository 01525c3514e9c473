"""Namespace quotas on DCU totals, the pure rules (HAMi's pkg/device/quota.go behaviour)."""

from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.common.protocol.quota import Amount, Limit, QuotaLimits, exceeded, limits_from, requested
from hami_dcu.common.protocol.requests import DcuRequest

DEFAULT_RESOURCES = DCU_NAMING.resources


def quota(name: str, **hard: str) -> dict:
    keys = {"memory": "limits.hygon.com/dcumem", "cores": "limits.hygon.com/dcucores"}
    return {"metadata": {"name": name, "namespace": "team"}, "spec": {"hard": {keys[k]: v for k, v in hard.items()}}}


def test_the_tightest_quota_of_a_namespace_decides():
    limits = limits_from([quota("a", memory="20k", cores="300"), quota("b", memory="8000"),
                          {"metadata": {"name": "cpu-only"}, "spec": {"hard": {"limits.cpu": "4"}}}], DEFAULT_RESOURCES)
    assert limits == QuotaLimits(memory=Limit(8000, "b"), cores=Limit(300, "a"))


def test_keys_other_than_the_dcu_limits_and_unreadable_values_set_nothing():
    assert not limits_from([{"metadata": {"name": "x"}, "spec": {"hard": {"requests.hygon.com/dcumem": "1"}}}],
                           DEFAULT_RESOURCES)
    assert not limits_from([quota("x", memory="lots")], DEFAULT_RESOURCES)
    assert limits_from([quota("x", memory="1500m")], DEFAULT_RESOURCES).memory == Limit(1, "x")


def test_a_pod_asks_for_its_app_containers_sum_or_its_largest_init_container():
    app = [DcuRequest(1, 2000, 30), None, DcuRequest(2, 1000, 10)]
    assert requested(app, 0) == Amount(4000, 50)
    assert requested([DcuRequest(1, 9000, 90), *app], 1) == Amount(9000, 90)
    # A whole card's memory is unknown before the card is chosen: 0 at admission (HAMi's rule).
    assert requested([DcuRequest(2)], 0) == Amount(0, 200)


def test_exceeding_names_the_quota_the_use_and_the_request():
    limits = QuotaLimits(memory=Limit(5000, "dcu"), cores=Limit(100, "dcu"))
    assert exceeded(limits, Amount(3000, 40), Amount(2000, 60), DEFAULT_RESOURCES) is None
    assert exceeded(limits, Amount(3000, 40), Amount(2001, 10), DEFAULT_RESOURCES) == (
        "exceeds ResourceQuota dcu limits.hygon.com/dcumem: quota 5000, used 3000, requested 2001")
    assert "limits.hygon.com/dcucores: quota 100, used 40, requested 61" in exceeded(
        limits, Amount(3000, 40), Amount(10, 61), DEFAULT_RESOURCES)


def test_an_explicit_limit_of_zero_blocks_every_dcu_pod():
    limits = QuotaLimits(memory=Limit(0, "none"))
    problem = exceeded(limits, Amount(), Amount(0, 100), DEFAULT_RESOURCES)
    assert problem is not None and "a limit of 0 blocks every DCU pod" in problem
