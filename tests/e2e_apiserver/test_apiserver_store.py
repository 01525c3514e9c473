"""In-process store access, thread safety, and the server's lifecycle."""

import asyncio
import threading

import pytest
import yaml
from kubernetes import client as k8s

from hami_dcu.cli.localcluster.apiserver import LocalApiServer, Store, StoreError


def test_store_returns_private_copies():
    store = Store()
    source = {"metadata": {"name": "n1", "labels": {"a": "b"}}}
    created = store.create("nodes", "", source)
    source["metadata"]["labels"]["a"] = "changed"
    created["metadata"]["labels"]["a"] = "changed"
    store.get("nodes", "", "n1")["metadata"]["labels"]["a"] = "changed"
    store.list("nodes")[0][0]["metadata"]["labels"]["a"] = "changed"
    assert store.get("nodes", "", "n1")["metadata"]["labels"] == {"a": "b"}


def test_store_verbs_and_errors():
    store = Store()
    store.create("pods", "default", {"metadata": {"name": "p"}})
    with pytest.raises(StoreError) as info:
        store.create("pods", "default", {"metadata": {"name": "p"}})
    assert info.value.code == 409 and info.value.reason == "AlreadyExists"
    rv = store.get("pods", "default", "p")["metadata"]["resourceVersion"]
    store.patch("pods", "default", "p", {"metadata": {"annotations": {"a": "1"}}})
    with pytest.raises(StoreError) as info:
        store.patch("pods", "default", "p", {"metadata": {"resourceVersion": rv, "labels": {"x": "y"}}})
    assert info.value.code == 409
    replaced = store.replace("pods", "default", "p", {"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}})
    assert replaced["spec"] == {"nodeName": "n1"} and "annotations" not in replaced["metadata"]
    assert store.find("pods", "default", "nope") is None
    assert store.delete("pods", "default", "p")["metadata"]["name"] == "p"
    with pytest.raises(StoreError) as info:
        store.get("pods", "default", "p")
    assert info.value.code == 404
    assert [c.type for c in store.changes_since(1)] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]


def test_history_is_bounded():
    store = Store(history=5)
    for i in range(8):
        store.create("nodes", "", {"metadata": {"name": f"n{i}"}})
    with pytest.raises(StoreError) as info:
        store.changes_since(1)
    assert info.value.code == 410 and info.value.reason == "Expired"
    latest = int(store.resource_version)
    assert [c.rv for c in store.changes_since(latest - 5)] == list(range(latest - 4, latest + 1))
    assert store.changes_since(latest) == []


def test_concurrent_writers_get_unique_increasing_versions():
    store = Store()
    seen: list[int] = []
    lock = threading.Lock()

    def writer(prefix):
        for i in range(100):
            rv = int(store.create("pods", "default", {"metadata": {"name": f"{prefix}-{i}"}})["metadata"]
                     ["resourceVersion"])
            with lock:
                seen.append(rv)

    threads = [threading.Thread(target=writer, args=(f"w{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 400 and max(seen) == int(store.resource_version)
    assert len(store.list("pods", "default")[0]) == 400


def test_wait_for(api_server, core):
    threading.Timer(0.1, lambda: core.create_node({"metadata": {"name": "late"}})).start()
    assert api_server.store.wait_for(lambda: api_server.store.find("nodes", "", "late") is not None, timeout=5)
    assert not api_server.store.wait_for(lambda: False, timeout=0.05)


def test_kubeconfig_and_temporary_directory():
    with LocalApiServer() as server:
        path = server.kubeconfig_path
        config = yaml.safe_load(path.read_text())
        assert config["clusters"][0]["cluster"]["server"] == server.url
        assert server.url.startswith("http://127.0.0.1:")
        assert config["users"][0]["user"]["token"] == server.token
    assert not path.exists()  # the temporary directory went with the server


async def test_async_context_manager(make_client):
    async with LocalApiServer() as server:
        def read() -> str:
            with make_client(server) as c:
                return k8s.CoreV1Api(c).read_namespace("kube-system").metadata.name

        assert await asyncio.to_thread(read) == "kube-system"
        assert server.run(asyncio.sleep(0, result="on the server loop")) == "on the server loop"
