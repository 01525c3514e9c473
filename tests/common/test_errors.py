"""The one rule for failures (common/protocol/errors.py) and the hierarchy it stands on: every exception
hami-dcu defines descends from HamiDcuError through its component's base, so "expected" is
one isinstance, and a bug is anything else."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import pkgutil

import pytest
from prometheus_client import CollectorRegistry

from hami_dcu.common.io.failures import Component, FailureReporter, internal_errors
from hami_dcu.common.io.kube import ConflictError, KubeError, UnreachableError
from hami_dcu.common.protocol.errors import (
    CliError,
    DevicePluginError,
    DraError,
    HamiDcuError,
    NodeError,
    SchedulerError,
    WebhookError,
    is_expected,
    judge,
)

# The node-side mechanisms live in deviceplugin/ until the node/ layer holds them.
BASES = {"common": HamiDcuError, "webhook": WebhookError, "scheduler": SchedulerError, "dra": DraError,
         "cli": CliError, "deviceplugin": (DevicePluginError, NodeError), "node": NodeError}
PRODUCT = tuple(folder for folder in BASES if importlib.util.find_spec(f"hami_dcu.{folder}") is not None)


def product_exceptions() -> list[type[BaseException]]:
    found = []
    for folder in PRODUCT:
        package = importlib.import_module(f"hami_dcu.{folder}")
        for module in pkgutil.walk_packages(package.__path__, f"hami_dcu.{folder}."):
            if ".api." in module.name:
                continue  # generated gRPC code
            loaded = importlib.import_module(module.name)
            found += [value for value in vars(loaded).values() if inspect.isclass(value)
                      and issubclass(value, BaseException) and value.__module__ == module.name]
    return found


def test_every_exception_hami_dcu_defines_descends_from_its_components_base():
    classes = product_exceptions()
    assert len(classes) >= 35
    for cls in classes:
        folder = cls.__module__.split(".")[1]
        assert issubclass(cls, BASES[folder]), f"{cls.__module__}.{cls.__qualname__} is not a {BASES[folder]}"


@pytest.mark.parametrize(("exc", "status", "code"), [
    (WebhookError("bad"), 400, "FAILED_PRECONDITION"),
    (KubeError(500, "InternalError", "etcd"), 503, "UNAVAILABLE"),
    (UnreachableError("refused"), 503, "UNAVAILABLE"),
    (ConflictError(409, "Conflict", "stale"), 409, "ABORTED"),
    (OSError(28, "No space left on device"), 503, "UNAVAILABLE"),
])
def test_an_expected_failure_is_answered_with_its_own_status_and_message(exc, status, code):
    failure = judge(exc, "webhook")
    assert is_expected(exc) and failure.expected
    assert (failure.http_status, failure.grpc_code, failure.message) == (status, code, str(exc))


@pytest.mark.parametrize("exc", [ZeroDivisionError("division by zero"), KeyError("spec"), TypeError("x"),
                                 AttributeError("y"), ValueError("z"), RuntimeError("w"), AssertionError()])
def test_anything_else_is_a_bug_answered_500_internal_without_its_details(exc):
    failure = judge(exc, "scheduler")
    assert not is_expected(exc) and not failure.expected
    assert (failure.http_status, failure.grpc_code) == (500, "INTERNAL")
    assert failure.message == f"internal error in the scheduler ({type(exc).__name__}); its log has the details"


def test_an_empty_message_still_says_what_failed():
    assert judge(DraError(), "dra-driver").message == "DraError"


def divide(a: int, b: int) -> float:
    return a / b


def test_the_reporter_logs_a_bug_with_its_traceback_and_counts_it(caplog):
    registry = CollectorRegistry()
    reporter = FailureReporter(Component.DEVICE_PLUGIN, registry, logging.getLogger("t"))
    assert registry.get_sample_value("hami_dcu_internal_errors_total", {"component": "device-plugin"}) == 0
    try:
        divide(1, 0)
    except ZeroDivisionError as exc:
        failure = reporter.failed(exc, "Allocate for pod ns/p on node n1")
    assert failure.http_status == 500
    [record] = caplog.records
    assert record.exc_info is not None and "pod ns/p on node n1" in record.getMessage()
    assert registry.get_sample_value("hami_dcu_internal_errors_total", {"component": "device-plugin"}) == 1
    caplog.clear()
    assert reporter.failed(KubeError(403, "Forbidden", "no"), "Allocate").expected
    [record] = caplog.records
    assert record.exc_info is None and "403 Forbidden: no" in record.getMessage()
    assert registry.get_sample_value("hami_dcu_internal_errors_total", {"component": "device-plugin"}) == 1


def test_components_sharing_a_registry_share_one_counter():
    registry = CollectorRegistry()
    FailureReporter(Component.SCHEDULER, registry, logging.getLogger("t"))
    FailureReporter(Component.WEBHOOK, registry, logging.getLogger("t"))  # --serve-webhook: one process
    assert internal_errors(registry) is internal_errors(registry)
    assert registry.get_sample_value("hami_dcu_internal_errors_total", {"component": "webhook"}) == 0
    assert registry.get_sample_value("hami_dcu_internal_errors_total", {"component": "scheduler"}) == 0
