"""The DRA driver answers the kubelet by common/protocol/errors.py's rule: a bug ends the call with gRPC
INTERNAL and a short message, its traceback logged naming the claim, counted in the driver's
registry; an expected refusal is that claim's error alone, one log line, uncounted; a claim
that names a device this node does not serve is refused as it always was."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from dra_helpers import NODE, claim, node_cards, paths, result
from fake_kube import FakeKube

from hami_dcu.cli.localcluster.kubelet import short_socket_dir
from hami_dcu.common.io.kube import UnreachableError
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.dra import core as core_module
from hami_dcu.dra.api.v1 import api_pb2 as v1_pb2
from hami_dcu.dra.api.v1 import api_pb2_grpc as v1_grpc
from hami_dcu.dra.core import DriverCore
from hami_dcu.dra.server import KubeletPluginServer
from hami_dcu.dra.service import DriverService

BUG = "internal error in the dra-driver (ZeroDivisionError); its log has the details"


@dataclass
class Driver:
    kube: FakeKube
    service: DriverService
    stub: v1_grpc.DRAPluginStub

    def prepare(self, *uids: str) -> v1_pb2.NodePrepareResourcesResponse:
        claims = [v1_pb2.Claim(namespace="ns", uid=uid, name=f"c-{uid}") for uid in uids]
        return self.stub.NodePrepareResources(v1_pb2.NodePrepareResourcesRequest(claims=claims), timeout=10)

    def unprepare(self, *uids: str) -> v1_pb2.NodeUnprepareResourcesResponse:
        claims = [v1_pb2.Claim(namespace="ns", uid=uid, name=f"c-{uid}") for uid in uids]
        return self.stub.NodeUnprepareResources(v1_pb2.NodeUnprepareResourcesRequest(claims=claims), timeout=10)

    @property
    def bugs(self) -> float:
        return self.service.metrics.registry.get_sample_value("hami_dcu_internal_errors_total",
                                                              {"component": "dra-driver"})


@pytest.fixture
def driver(tmp_path) -> Iterator[Driver]:
    sockets = short_socket_dir("dra-e-")
    kube = FakeKube(NODE)
    service = DriverService(kube, DriverCore(NODE, node_cards(tmp_path), paths(tmp_path)), 4, lambda: {},
                            naming=DCU_NAMING)
    server = KubeletPluginServer(service.prepare, service.unprepare, sockets / "registry", sockets / "plugins",
                                 metrics_registry=service.metrics.registry).start()
    try:
        with grpc.insecure_channel(f"unix://{server.plugin_socket}") as channel:
            yield Driver(kube, service, v1_grpc.DRAPluginStub(channel))
    finally:
        server.stop()
        shutil.rmtree(sockets, ignore_errors=True)


def tracebacks(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info is not None]


def test_a_bug_in_prepare_is_internal_logged_naming_the_claim_and_counted(driver, monkeypatch, caplog):
    assert driver.bugs == 0
    driver.kube.add_claim(claim("uid-a", result(cores="30", memory="2Gi"), name="c-uid-a"))

    def broken(*_args: object) -> object:
        return 1 / 0

    monkeypatch.setattr(core_module, "plan_claim", broken)
    with pytest.raises(grpc.RpcError) as raised:
        driver.prepare("uid-a")
    assert raised.value.code() == grpc.StatusCode.INTERNAL and raised.value.details() == BUG
    [record] = tracebacks(caplog)
    assert record.exc_info[0] is ZeroDivisionError and "claim ns/c-uid-a (uid-a)" in record.getMessage()
    assert driver.bugs == 1
    assert not driver.service.core.prepared


def test_a_bug_in_unprepare_is_internal_and_counted(driver, monkeypatch, caplog):
    def broken(_uid: str) -> bool:
        raise KeyError("uid-a")

    monkeypatch.setattr(driver.service.core, "unprepare", broken)
    with pytest.raises(grpc.RpcError) as raised:
        driver.unprepare("uid-a")
    assert raised.value.code() == grpc.StatusCode.INTERNAL and "(KeyError)" in raised.value.details()
    assert len(tracebacks(caplog)) == 1 and driver.bugs == 1


def test_an_expected_failure_is_that_claims_error_alone_without_a_traceback(driver, caplog):
    driver.kube.add_claim(claim("uid-a", result(cores="30", memory="2Gi"), name="c-uid-a"))
    driver.kube.add_claim(claim("uid-bad", result(device="hcu-nope"), name="c-uid-bad"))
    answers = driver.prepare("uid-a", "uid-bad").claims
    assert "not served on node n1" in answers["uid-bad"].error
    assert not answers["uid-a"].error and len(answers["uid-a"].devices) == 1  # the other claim is prepared
    assert not tracebacks(caplog) and driver.bugs == 0


def test_an_api_server_gone_is_the_claims_error_not_a_bug(driver, monkeypatch, caplog):
    def unreachable(*_args: object, **_kwargs: object) -> object:
        raise UnreachableError("connection refused")

    monkeypatch.setattr(driver.kube, "request", unreachable)
    answers = driver.prepare("uid-x").claims
    assert "cannot read it: connection refused" in answers["uid-x"].error
    assert not tracebacks(caplog) and driver.bugs == 0
