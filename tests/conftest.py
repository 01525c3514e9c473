"""Shared fixtures: a local API server per test and clients of it."""

from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings

from hami_dcu.common.io.kube import Kube

# Shared 2-core CI machines: a slow example is not a failure. Properties, not timings, are tested.
settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


@pytest.fixture
def api_server(tmp_path) -> Iterator[object]:
    from hami_dcu.cli.localcluster.apiserver import LocalApiServer

    with LocalApiServer(kubeconfig_path=tmp_path / "kubeconfig") as server:
        yield server


@pytest.fixture
def kube_factory(api_server) -> Callable[[], Kube]:
    """A new client (own connection pool) per call, as separate processes would have."""
    return lambda: Kube.from_kubeconfig(str(api_server.kubeconfig_path))


@pytest.fixture
def kube(kube_factory) -> Kube:
    return kube_factory()


@pytest.fixture
def node(kube) -> str:
    kube.create_node({"metadata": {"name": "n1", "labels": {"dcu": "on"}}})
    return "n1"
