"""The local-cluster scheduler loop drives /filter and /bind over real HTTP; the server's
own endpoints (readyz, metrics, --serve-webhook) behave."""

import asyncio

import pytest
from scheduler_helpers import create_nodes, dcu_pod, dcu_settings, until

from hami_dcu.cli.localcluster.scheduler_loop import SchedulerLoop
from hami_dcu.cli.main import build_parser
from hami_dcu.common.protocol import keys
from hami_dcu.scheduler import command
from hami_dcu.scheduler.app import build_app

DCU = keys.DCU_NAMING  # the naming set these tests speak


async def test_loop_binds_our_pods_and_reports_unschedulable_ones(kube_factory, service, aiohttp_server):
    kube = kube_factory()
    create_nodes(kube, ["n1"])
    kube.create_pod("default", dcu_pod("fits"))
    kube.create_pod("default", dcu_pod("too-big", memory=100000))
    kube.create_pod("default", dcu_pod("not-ours", scheduler="default-scheduler"))
    await until(lambda: service.cache.node("n1") is not None)
    server = await aiohttp_server(build_app(service, manage_lifecycle=False))
    loop = SchedulerLoop(kube_factory(), str(server.make_url("/")), interval=0.02, initial_backoff=0.1)
    runner = asyncio.ensure_future(loop.run())

    def failed_events():
        events = kube.request("GET", "/api/v1/namespaces/default/events")["items"]
        return [e for e in events if e["reason"] == "FailedScheduling"]

    try:
        await until(lambda: loop.stats.bound.get("default/fits") == "n1", timeout=10)
        await until(lambda: loop.stats.filter_failures["default/too-big"] >= 2, timeout=10)
        await until(lambda: failed_events(), timeout=5)
    finally:
        loop._stop.set()
        await runner
        loop.kube.close()
    fits = kube.get_pod("default", "fits")
    assert fits["spec"]["nodeName"] == "n1"
    assert fits["metadata"]["annotations"][keys.POD_BIND_PHASE] == keys.BIND_PHASE_ALLOCATING
    assert not kube.get_pod("default", "not-ours")["spec"].get("nodeName")
    message = failed_events()[0]["message"]
    # As real kube-scheduler words it: nodes counted per reason, no node names.
    assert message == ("0/1 nodes are available: 1 insufficient card memory: container main needs 1 card x "
                       "(100000 MiB, 60 percent of cores).")


async def test_readyz_metrics_and_webhook_mount(service, aiohttp_client):
    app = build_app(service, manage_lifecycle=False)
    parser, _ = build_parser()
    command._mount_webhook(app, parser.parse_args(["scheduler", "--scheduler-name", "hami-scheduler"]), service)
    client = await aiohttp_client(app)
    assert (await client.get("/readyz")).status == 200
    metrics = await (await client.get("/metrics")).text()
    assert "hami_dcu_scheduler_filter_seconds" in metrics
    assert "hami_dcu_scheduler_node_lock_contention" in metrics
    review = await client.post("/webhook", data=b"{}")
    assert review.status == 400  # the webhook's own answer to a bad review: the route is mounted


def test_dra_webhook_mount_needs_the_api():
    # DRA mode's webhook lists the published card sizes: an extender without a client cannot serve it.
    from aiohttp import web

    from hami_dcu.scheduler.service import SchedulerService

    app = web.Application()
    parser, _ = build_parser()
    args = parser.parse_args(["scheduler", "--scheduler-name", "hami-scheduler", "--mode", "dra"])
    with pytest.raises(ValueError, match="needs the API server"):
        command._mount_webhook(app, args, SchedulerService(None, dcu_settings(mode="dra")))
    assert not any(route.resource and route.resource.canonical == "/webhook" for route in app.router.routes())


def test_dra_webhook_reads_the_card_sizes_from_the_slice_watch():
    # Issue 40, item 6: each slice is kept as its cards' sizes, for the webhook in this process.
    from aiohttp import web

    from hami_dcu.common.io.kube import AsyncKube
    from hami_dcu.scheduler.service import SchedulerService

    service = SchedulerService(AsyncKube(None), dcu_settings(mode="dra"))  # type: ignore[arg-type]
    parser, _ = build_parser()
    args = parser.parse_args(["scheduler", "--scheduler-name", "hami-scheduler", "--mode", "dra"])
    command._mount_webhook(web.Application(), args, service)
    informer = service.dra_informer
    assert informer is not None and informer.slice_digest is not None
    published = {"metadata": {"name": "n1-slice"}, "spec": {"driver": "dra.hygon.com", "pool": {"name": "n1"},
                 "devices": [{"name": "d0", "capacity": {"cores": {"value": "120"}, "memory": {"value": "64Gi"}}}]}}
    digest = informer.slice_digest(published)
    assert digest.units == (120,) and list(digest.by_device) == [("n1", "d0")]  # type: ignore[attr-defined]


def test_settings_from_flags():
    parser, _ = build_parser()
    args = parser.parse_args(["scheduler", "--node-policy", "spread", "--device-policy", "binpack",
                              "--lock-timeout", "60"])
    settings = command.settings_from(args)
    assert (settings.filter.node_policy, settings.filter.card_policy) == ("spread", "binpack")
    assert settings.bind.lock_timeout.total_seconds() == 60
    assert settings.filter.naming is keys.DCU_NAMING and settings.filter.resources is keys.DCU_NAMING.resources
    hcu = command.settings_from(parser.parse_args(["scheduler", "--naming", "hcu"])).filter
    assert hcu.naming is keys.HCU_NAMING and hcu.resources is keys.HCU_NAMING.resources


async def test_invalid_request_fails_every_node_as_unresolvable(kube, service, aiohttp_client):
    from scheduler_helpers import filter_args

    client = await aiohttp_client(build_app(service, manage_lifecycle=False))
    pod = dcu_pod("bad", memory=2000, cores=60)
    del pod["spec"]["containers"][0]["resources"]["limits"][DCU.resources.count]
    pod["metadata"]["uid"] = "u-bad"
    answer = await (await client.post("/filter", json=filter_args(pod, ["n1", "n2"]))).json()
    assert answer["NodeNames"] == []
    assert set(answer["FailedAndUnresolvableNodes"]) == {"n1", "n2"}
    assert "need hygon.com/dcunum" in answer["FailedAndUnresolvableNodes"]["n1"]


def test_command_serves_against_a_cluster(api_server, tmp_path):
    """`hami-dcu scheduler` as an operator runs it: ready after the first sync, answers /filter."""
    import json
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "hami_dcu.cli.main", "scheduler", "--kubeconfig", str(api_server.kubeconfig_path),
         "--bind", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.1)
        body = json.dumps({"Pod": dcu_pod("p", uid="u1"), "NodeNames": ["ghost"]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/filter", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            answer = json.loads(response.read())
        assert answer["NodeNames"] == []
        assert "not in the scheduler cache" in answer["FailedNodes"]["ghost"]
    finally:
        process.terminate()
        process.wait(10)
