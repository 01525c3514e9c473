"""Issue 36, item 4: two driver instances on one node during a rolling update. Sockets named
after each pod's UID, so both register; an instance that stops leaves the kubelet's registry
before it stops answering, removes only its own sockets and never the ResourceSlice; the node
state (records, vDCU allocator, prepared claims, the quota ledger's view of them) stays one
state across the two processes."""

import multiprocessing
import os
import shutil
import threading
import time
from pathlib import Path

import grpc
import pytest
from dra_helpers import CARDS, DEV1, NODE, claim, node_cards, paths, result
from fake_kube import FakeKube

from e2e.realcluster.dra_client import register
from hami_dcu.cli.localcluster.kubelet import short_socket_dir
from hami_dcu.cli.main import build_parser
from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.dra import quotagate
from hami_dcu.dra.cdi import spec_file_name
from hami_dcu.dra.command import DriverLoop, build
from hami_dcu.dra.core import DriverCore, PrepareFailed
from hami_dcu.dra.ledger import QuotaLedger
from hami_dcu.dra.quotagate import LEFTOVER_AGE
from hami_dcu.dra.records import RecordStore
from hami_dcu.dra.server import UNIX_PATH_MAX, ClaimRef, KubeletPluginServer, plugin_socket, registration_socket
from hami_dcu.dra.service import DriverService
from hami_dcu.node.discovery import discover

OLD_UID = "0f3c2a54-8c1e-4c37-9d27-2b1f0e6a7c11"
NEW_UID = "7a9e1d02-45b3-4f6e-8a10-c3d5e7f90b22"


# --- socket names -----------------------------------------------------------------------------


def test_without_a_pod_uid_the_sockets_keep_their_fixed_names():
    assert registration_socket(Path("/r"), None) == Path("/r/dra.hygon.com-reg.sock")
    assert plugin_socket(Path("/p"), None) == Path("/p/dra.hygon.com/dra.sock")


def test_each_pod_uid_names_its_own_sockets():
    registry, plugins = Path("/var/lib/kubelet/plugins_registry"), Path("/var/lib/kubelet/plugins")
    assert registration_socket(registry, OLD_UID) == registry / f"dra.hygon.com-{OLD_UID}-reg.sock"
    assert plugin_socket(plugins, OLD_UID) == plugins / "dra.hygon.com" / f"dra-{OLD_UID}.sock"
    assert registration_socket(registry, OLD_UID) != registration_socket(registry, NEW_UID)
    assert plugin_socket(plugins, OLD_UID) != plugin_socket(plugins, NEW_UID)


def test_a_long_directory_gets_a_hashed_name_that_still_fits_a_socket_address():
    deep = Path("/" + "d" * 40) / ("e" * 18)  # 60 bytes: the UID's names are too long here
    for make in (registration_socket, plugin_socket):
        old, new = make(deep, OLD_UID), make(deep, NEW_UID)
        assert OLD_UID not in old.name and old != new
        assert len(os.fsencode(old)) <= UNIX_PATH_MAX and len(os.fsencode(new)) <= UNIX_PATH_MAX
        assert make(deep, OLD_UID) == old  # the same pod finds the same name again


def test_a_pod_uid_that_could_name_another_file_is_refused():
    parser, _ = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_command_line(["dra-driver", "--pod-uid", "../x"])
    with pytest.raises(ValueError, match="unusable pod UID"):
        KubeletPluginServer(lambda ref: None, lambda ref: None, Path("/r"), Path("/p"), pod_uid="a/b")


def test_the_pod_uid_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("POD_UID", NEW_UID)
    parser, _ = build_parser()
    assert parser.parse_command_line(["dra-driver"]).pod_uid == NEW_UID
    monkeypatch.delenv("POD_UID")
    parser, _ = build_parser()
    assert parser.parse_command_line(["dra-driver"]).pod_uid is None


# --- two instances on one node's sockets --------------------------------------------------------


@pytest.fixture
def node(tmp_path):
    """One node's directories, kube and cards; `start(uid)` runs a driver instance on them."""
    sockets = short_socket_dir("dra-r-")
    kube = FakeKube(NODE)
    cards = node_cards(tmp_path)
    servers: list[KubeletPluginServer] = []

    def start(uid: str | None, **kw) -> tuple[KubeletPluginServer, DriverService]:
        service = DriverService(kube, DriverCore(NODE, cards, paths(tmp_path)), 4, lambda: {}, naming=DCU_NAMING)
        service.core.rebuild()
        server = KubeletPluginServer(service.prepare, service.unprepare, sockets / "registry", sockets / "plugins",
                                     poll_interval=0.1, pod_uid=uid, **kw).start()
        servers.append(server)
        return server, service

    yield start, kube, sockets
    for server in servers:
        server.stop()
    shutil.rmtree(sockets, ignore_errors=True)


def test_two_instances_register_side_by_side_and_the_old_ones_exit_leaves_the_new_one_serving(node):
    start, kube, sockets = node
    old, _ = start(OLD_UID, deregister_wait=0)
    new, _ = start(NEW_UID, deregister_wait=0)
    first, second = register(old.registry_socket, Path), register(new.registry_socket, Path)
    assert first.driver == second.driver == names.DRIVER and first.socket != second.socket
    assert sorted(p.name for p in (sockets / "registry").iterdir()) == sorted(
        [f"dra.hygon.com-{OLD_UID}-reg.sock", f"dra.hygon.com-{NEW_UID}-reg.sock"])

    kube.add_claim(claim("uid-a", result(cores="30", memory="1Gi", share_id="share-a")))
    before = first.prepare([("ns", "uid-a", "c1")])["uid-a"].devices  # prepared by the old one
    assert before
    old.stop()
    assert not old.registry_socket.exists() and not old.plugin_socket.exists()
    assert new.registry_socket.exists() and new.plugin_socket.exists()
    # The kubelet's next call goes to the new one, which knows the claim the old one prepared:
    # the same devices and CDI ids, nothing allocated twice.
    again = second.prepare([("ns", "uid-a", "c1")])["uid-a"].devices
    assert [(d.device, list(d.cdi_ids), d.share_id) for d in again] == [
        (d.device, list(d.cdi_ids), d.share_id) for d in before]
    assert second.unprepare([("ns", "uid-a", "c1")]) == {"uid-a": ""}
    first.close()
    second.close()


def test_readiness_follows_the_kubelets_registration(node, tmp_path):
    start, _, _ = node
    ready = tmp_path / "run" / "registered"
    server, _ = start(NEW_UID, ready_file=ready, deregister_wait=0)
    assert not ready.exists()  # serving is not enough: the kubelet has not called it yet
    endpoint = register(server.registry_socket, Path)
    assert ready.exists()
    endpoint.close()
    server.stop()
    assert not ready.exists()


def test_a_refused_registration_is_not_ready(node, tmp_path, monkeypatch):
    from e2e.realcluster import dra_client

    start, _, _ = node
    ready = tmp_path / "run" / "registered"
    server, _ = start(NEW_UID, ready_file=ready, deregister_wait=0)
    register(server.registry_socket, Path).close()
    monkeypatch.setattr(dra_client, "KUBELET_SERVICES", ("v2.DRAPlugin",))
    with pytest.raises(dra_client.RegistrationRefused):
        register(server.registry_socket, Path)
    assert not ready.exists()


def test_at_exit_the_registration_goes_first_and_the_plugin_still_answers_meanwhile(node):
    start, kube, _ = node
    server, _ = start(OLD_UID, deregister_wait=1.0)
    endpoint = register(server.registry_socket, Path)
    kube.add_claim(claim("uid-a", result(cores="10", memory="1Gi")))
    stopping = threading.Thread(target=server.stop)
    stopping.start()
    deadline = time.monotonic() + 5
    while server.registry_socket.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not server.registry_socket.exists() and stopping.is_alive()
    # The kubelet has not deregistered yet: its call in this window is served, not refused.
    assert endpoint.prepare([("ns", "uid-a", "c1")])["uid-a"].devices
    stopping.join(10)
    assert not server.plugin_socket.exists()
    with pytest.raises(grpc.RpcError):
        endpoint.prepare([("ns", "uid-a", "c1")])
    endpoint.close()


def test_an_exit_removes_no_socket_another_process_bound_since(tmp_path):
    """With the fixed names (no pod UID) a newer instance binds the same path: the old one's
    own cleanup must not take it (gRPC's stop already unlinks by path; this is ours)."""
    sockets = short_socket_dir("dra-r-")
    try:
        server = KubeletPluginServer(lambda ref: None, lambda ref: None, sockets / "reg", sockets / "plugins",
                                     poll_interval=30)
        server.start()
        server.plugin_socket.unlink()
        server.plugin_socket.write_text("another process's socket\n")
        server._remove(server.plugin_socket)
        assert server.plugin_socket.read_text() == "another process's socket\n"
        server.stop()
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def test_a_stopping_driver_leaves_the_resource_slice_to_the_new_one(tmp_path):
    """The old instance's exit withdraws nothing: the slice stays as published (the new one
    publishes the same name), and the kubelet wipes slices only when no instance is left."""
    sockets = short_socket_dir("dra-r-")
    try:
        parser, _ = build_parser()
        mock = tmp_path / "mock.yaml"
        mock.write_text("".join(f"- {{serial: {c.serial}, model: {c.model}, memory_mib: {c.memory_mib}, "
                                f"compute_units: {c.compute_units}, pci_bus_id: '{c.pci_bus_id}', numa: {c.numa}}}\n"
                                for c in CARDS))
        args = parser.parse_command_line([
            "dra-driver", "--node-name", NODE, "--smi", "mock", "--mock-devices", str(mock), "--mock-fake-tree",
            "--dev-root", str(tmp_path / "dev"), "--sys-root", str(tmp_path / "sys"),
            "--registry-dir", str(sockets / "reg"), "--kubelet-plugins-dir", str(sockets / "plugins"),
            "--cdi-dir", str(tmp_path / "cdi"), "--vdev-dir", str(tmp_path / "vgpu"),
            "--etc-vdev", str(tmp_path / "etc"), "--state-dir", str(tmp_path / "state"), "--pod-uid", OLD_UID])
        kube = FakeKube(NODE)
        service, server = build(args, kube)
        loop = DriverLoop(service, interval=30, health_interval=0.05)
        server.start()
        running = threading.Thread(target=loop.run)
        running.start()
        deadline = time.monotonic() + 5
        while not kube.slices and time.monotonic() < deadline:
            time.sleep(0.01)
        assert kube.slices
        loop.stopping.set()  # what SIGTERM does; run()'s finally stops the server
        running.join(5)
        server.stop()
        assert "DELETE" not in kube.writes and list(kube.slices) == [names.slice_name(NODE)]
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


# --- one node state across two processes --------------------------------------------------------


def test_a_claim_prepared_by_one_instance_is_known_to_the_other(tmp_path):
    cards = node_cards(tmp_path)
    old, new = DriverCore(NODE, cards, paths(tmp_path)), DriverCore(NODE, cards, paths(tmp_path))
    old.rebuild()
    new.rebuild()
    a = old.prepare(claim("uid-a", result(cores="50", memory="1Gi")))
    # The new one allocates around the old one's grant, not over it.
    b = new.prepare(claim("uid-b", result(cores="50", memory="1Gi")))
    ga, gb = a.devices[0].vdev, b.devices[0].vdev
    assert ga.cu_mask & gb.cu_mask == 0 and ga.pipe != gb.pipe and ga.vdev != gb.vdev
    with pytest.raises(PrepareFailed, match="30 compute units requested, 20 free"):
        old.prepare(claim("uid-c", result(cores="30", memory="1Gi")))
    # Prepared in one, asked again of the other: the same record, nothing allocated twice.
    assert new.prepare(claim("uid-a", result(cores="50", memory="1Gi"))) == a
    # Prepared in one, unprepared in the other: files and grants gone for both.
    assert new.unprepare("uid-a") is True
    assert not (old.paths.cdi_dir / spec_file_name("uid-a")).exists()
    assert old.record("uid-a") is None and old.unprepare("uid-a") is False
    old.prepare(claim("uid-c", result(cores="30", memory="1Gi")))
    assert {r.uid for r in new.prepared_claims()} == {"uid-b", "uid-c"}


def test_a_record_written_without_the_lock_is_seen_too(tmp_path):
    """A driver from before the lock (the first upgrade onto it) writes its records and no
    token: the record directory's listing shows the change all the same."""
    cards = node_cards(tmp_path)
    core = DriverCore(NODE, cards, paths(tmp_path))
    core.rebuild()
    a = core.prepare(claim("uid-a", result(cores="50", memory="1Gi")))
    # The old driver's record of uid-b, granted beside uid-a, lands in the directory unlocked.
    elsewhere = DriverCore(NODE, cards, paths(tmp_path / "old"))
    elsewhere.prepare(claim("uid-x", result(cores="50", memory="1Gi")))
    b = elsewhere.prepare(claim("uid-b", result(cores="50", memory="1Gi")))
    shutil.copy(elsewhere.store.path("uid-b"), core.store.path("uid-b"))
    c = core.prepare(claim("uid-c", result(cores="20", memory="1Gi")))
    taken = a.devices[0].vdev.cu_mask | b.devices[0].vdev.cu_mask
    assert c.devices[0].vdev.cu_mask & taken == 0 and c.devices[0].vdev.vdev not in (0, 1)
    assert {r.uid for r in core.prepared_claims()} == {"uid-a", "uid-b", "uid-c"}


def test_an_unchanged_node_state_is_not_read_again(tmp_path, monkeypatch):
    core = DriverCore(NODE, node_cards(tmp_path), paths(tmp_path))
    core.rebuild()
    reads = []
    load_all = core.store.load_all
    monkeypatch.setattr(core.store, "load_all", lambda: reads.append(1) or load_all())
    for uid in ("uid-a", "uid-b", "uid-c"):
        core.prepare(claim(uid, result(cores="10", memory="1Gi")))
    core.unprepare("uid-a")
    assert reads == [] and len(core.prepared_claims()) == 2
    # Another process's change, and only that, has it read the records again (once).
    other = DriverCore(NODE, node_cards(tmp_path / "other"), paths(tmp_path))
    other.unprepare("uid-b")
    assert core.record("uid-b") is None and core.record("uid-c") is not None and reads == [1]


def test_the_lock_file_is_not_kept_open_between_calls(tmp_path):
    """A process simulating many nodes (bench/, e2e/realcluster/drasim.py) has a core per node:
    none keeps a descriptor once its call is done."""
    cores = [DriverCore(NODE, node_cards(tmp_path / f"n{i}"), paths(tmp_path / f"n{i}")) for i in range(3)]
    for core in cores:
        core.rebuild()
        core.prepare(claim("uid-a", result(cores="10", memory="1Gi")))
    lock_files = {str(core.shared.path) for core in cores}
    assert all(Path(f).exists() for f in lock_files)
    open_now = {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                if os.path.exists(f"/proc/self/fd/{fd}")}
    assert not lock_files & open_now


def test_the_old_instances_reconcile_keeps_the_ledger_entry_of_a_claim_the_new_one_prepared(tmp_path):
    ledger_at = ("kube-system", "r-hami-dcu-dra-driver-quota")
    kube = FakeKube(NODE)
    kube.add_ledger(*ledger_at)
    kube.quotas["ns"] = [{"metadata": {"name": "q"}, "spec": {"hard": {"limits.hygon.com/dcumem": "10240"}}}]
    cards = node_cards(tmp_path)
    now = [1000.0]

    def service() -> DriverService:
        ledger = QuotaLedger(kube, *ledger_at, node=NODE, resources=DCU_NAMING.resources, wall=lambda: now[0])
        core = DriverCore(NODE, cards, paths(tmp_path))
        core.rebuild()
        return DriverService(kube, core, 4, lambda: {}, ledger=ledger, naming=DCU_NAMING)

    old, new = service(), service()
    kube.add_claim(claim("u1", result(cores="30", memory="8Gi", share_id="s-u1"), name="u1"))
    new.prepare(ref("u1"))
    now[0] += LEFTOVER_AGE + 1
    old.reconcile()  # its prune asks which claims are prepared here: the new one's too
    entries = quotagate.read_namespace(kube.configmaps[ledger_at]["data"], "ns")
    assert set(entries) == {"u1"}
    # The kubelet unprepares it through the old one: the quota is given back all the same.
    old.unprepare(ref("u1"))
    assert quotagate.read_namespace(kube.configmaps[ledger_at]["data"], "ns") == {}
    assert new.core.record("u1") is None


def ref(uid: str) -> ClaimRef:
    return ClaimRef("ns", uid, uid)


def _instance(root, tag, attempts, start, answers):
    """One driver process: prepares `attempts` claims as fast as it can, unpreparing every
    third one it got, beside another process doing the same on the same node state."""
    base = Path(root)
    cards = discover(CARDS, base / "sys", base / "dev", DCU_NAMING)
    core = DriverCore(NODE, cards, paths(base))
    core.rebuild()
    start.wait(30)
    prepared, failed = [], 0
    for i in range(attempts):
        uid = f"{tag}-{i}"
        device = DEV1 if i % 4 == 3 else None
        body = claim(uid, result(device=device, cores="10", memory="1Gi") if device else
                     result(cores="10", memory="1Gi"), name=uid)
        try:
            core.prepare(body)
        except PrepareFailed:
            failed += 1
            continue
        prepared.append(uid)
        if len(prepared) % 3 == 0:
            core.unprepare(prepared.pop(0))
    answers.put((tag, prepared, failed))


def test_two_processes_preparing_at_once_keep_one_consistent_node_state(tmp_path):
    node_cards(tmp_path)  # the fake /sys and /dev, laid out once for both
    context = multiprocessing.get_context("spawn")
    start, answers = context.Barrier(2), context.Queue()
    workers = [context.Process(target=_instance, args=(str(tmp_path), tag, 24, start, answers)) for tag in "ab"]
    for worker in workers:
        worker.start()
    got = dict((tag, (held, failed)) for tag, held, failed in (answers.get(timeout=120) for _ in workers))
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    held = {uid for tag in got for uid in got[tag][0]}
    records = RecordStore(tmp_path / "state" / "claims").load_all()
    assert {r.uid for r in records} == held  # each process's view is what is on disk
    grants = [(r.uid, d.vdev) for r in records for d in r.devices]
    # No CU, pipe or vdev id granted twice, whichever process granted it.
    for card in {g.card_index for _, g in grants}:
        on_card = [g for _, g in grants if g.card_index == card]
        masks = [g.cu_mask for g in on_card]
        assert sum(bin(m).count("1") for m in masks) == bin(_union(masks)).count("1")
        assert len({g.pipe for g in on_card}) == len(on_card)
    assert len({g.vdev for _, g in grants}) == len(grants)
    # The files a container sees are exactly the records' (none left of an unprepared claim).
    vdev_dirs = {p.name for p in (tmp_path / "vgpu").iterdir()} if (tmp_path / "vgpu").exists() else set()
    assert vdev_dirs == {d.vdev_spec(r.uid).dirname for r in records for d in r.devices}
    assert {p.name for p in (tmp_path / "cdi").iterdir()} == {spec_file_name(r.uid) for r in records}
    assert {p.name for p in (tmp_path / "etc-vdev").iterdir()} == {f"vdev{g.vdev}.conf" for _, g in grants}
    # A fresh process reads the same state back.
    again = DriverCore(NODE, node_cards(tmp_path / "again"), paths(tmp_path))
    assert {r.uid for r in again.prepared_claims()} == held


def _union(masks: list[int]) -> int:
    out = 0
    for mask in masks:
        out |= mask
    return out
