"""Clients of the local API server built from its kubeconfig, never from global config."""

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config


def api_client(server) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(server.kubeconfig_path), client_configuration=configuration)
    return k8s.ApiClient(configuration)


@pytest.fixture
def client(api_server) -> Iterator[k8s.ApiClient]:
    with api_client(api_server) as c:
        yield c


@pytest.fixture
def core(client) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(client)


@pytest.fixture
def admreg(client) -> k8s.AdmissionregistrationV1Api:
    return k8s.AdmissionregistrationV1Api(client)



@pytest.fixture
def make_client():
    """ApiClient factory for servers a test starts itself."""
    return api_client
