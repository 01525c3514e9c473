"""The kubelet's half of DRA, without the pods: what a kubelet does with a DRA driver's
sockets and with the CDI ids it returns.

* `register`: the plugin watcher's handshake on a socket in `plugins_registry`: GetInfo,
  checks (type `DRAPlugin`, a gRPC service this kubelet speaks: `v1.DRAPlugin`, else
  `v1beta1.DRAPlugin`, as kubelet 1.37 picks), dial the endpoint, NotifyRegistrationStatus;
* `DraEndpoint.prepare/unprepare`: NodePrepareResources / NodeUnprepareResources with the
  claims' namespace, UID and name, answers per claim UID;
* `resolve_cdi`: what a container runtime does with CDI ids: find each device in the spec
  files of the CDI directory and merge its edits with its spec's (unknown ids fail, as
  containerd fails CreateContainer with "unresolvable CDI devices").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml

from hami_dcu.dra.api.pluginregistration import api_pb2 as reg_pb2
from hami_dcu.dra.api.pluginregistration import api_pb2_grpc as reg_grpc
from hami_dcu.dra.api.v1 import api_pb2 as v1_pb2
from hami_dcu.dra.api.v1 import api_pb2_grpc as v1_grpc
from hami_dcu.dra.api.v1beta1 import api_pb2 as v1beta1_pb2
from hami_dcu.dra.api.v1beta1 import api_pb2_grpc as v1beta1_grpc

log = logging.getLogger(__name__)
JSON = dict[str, Any]
KUBELET_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # what kubelet 1.37 speaks, newest first
CALL_TIMEOUT = 45.0  # the kubelet's default DRA call timeout


class RegistrationRefused(RuntimeError):
    pass


@dataclass(frozen=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None


@dataclass
class ClaimAnswer:
    devices: list[PreparedDevice] = field(default_factory=list)
    error: str = ""


class DraEndpoint:
    def __init__(self, driver: str, service: str, socket: Path) -> None:
        self.driver = driver
        self.service = service
        self.socket = socket
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        if service == "v1.DRAPlugin":
            self.pb2: Any = v1_pb2
            self.stub: Any = v1_grpc.DRAPluginStub(self.channel)
        else:
            self.pb2, self.stub = v1beta1_pb2, v1beta1_grpc.DRAPluginStub(self.channel)

    def _claims(self, claims: list[tuple[str, str, str]]) -> list[Any]:
        return [self.pb2.Claim(namespace=ns, uid=uid, name=name) for ns, uid, name in claims]

    def prepare(self, claims: list[tuple[str, str, str]]) -> dict[str, ClaimAnswer]:
        """(namespace, uid, name) per claim -> answer per claim UID."""
        response = self.stub.NodePrepareResources(self.pb2.NodePrepareResourcesRequest(claims=self._claims(claims)),
                                                  timeout=CALL_TIMEOUT)
        answers = {}
        for uid, answer in response.claims.items():
            devices = [PreparedDevice(tuple(d.request_names), d.pool_name, d.device_name, tuple(d.cdi_device_ids),
                                      d.share_id if self.service == "v1.DRAPlugin" and d.HasField("share_id")
                                      else None)
                       for d in answer.devices]
            answers[uid] = ClaimAnswer(devices, answer.error)
        return answers

    def unprepare(self, claims: list[tuple[str, str, str]]) -> dict[str, str]:
        """Answer (error text, empty when done) per claim UID."""
        response = self.stub.NodeUnprepareResources(
            self.pb2.NodeUnprepareResourcesRequest(claims=self._claims(claims)), timeout=CALL_TIMEOUT)
        return {uid: answer.error for uid, answer in response.claims.items()}

    def close(self) -> None:
        self.channel.close()


def register(registration_socket: Path, host_path: Callable[[str], Path]) -> DraEndpoint:
    """The plugin watcher's handshake. `host_path` maps the endpoint the driver names (a path
    on the node) to where that is from here."""
    with grpc.insecure_channel(f"unix://{registration_socket}") as channel:
        stub = reg_grpc.RegistrationStub(channel)
        info = stub.GetInfo(reg_pb2.InfoRequest(), timeout=10)

        def refuse(why: str) -> RegistrationRefused:
            stub.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=False, error=why), timeout=10)
            return RegistrationRefused(f"{registration_socket}: {why}")

        if info.type != "DRAPlugin":
            raise refuse(f"plugin type {info.type!r} is not DRAPlugin")
        if not info.name:
            raise refuse("the plugin names no DRA driver")
        service = next((s for s in info.supported_versions if s in KUBELET_SERVICES), None)
        if service is None:
            raise refuse(f"none of the services {list(info.supported_versions)} is one this kubelet speaks "
                         f"{list(KUBELET_SERVICES)}")
        endpoint = DraEndpoint(info.name, service, host_path(info.endpoint))
        stub.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=True), timeout=10)
    log.info("DRA driver %s registered (%s at %s)", info.name, service, info.endpoint)
    return endpoint


# --- CDI -----------------------------------------------------------------------------------


class CdiError(RuntimeError):
    pass


@dataclass
class ContainerEdits:
    device_nodes: list[JSON] = field(default_factory=list)  # {path, hostPath, permissions}
    mounts: list[JSON] = field(default_factory=list)  # {containerPath, hostPath, options}
    env: list[str] = field(default_factory=list)

    def add(self, edits: JSON) -> None:
        for node in edits.get("deviceNodes") or []:
            if node not in self.device_nodes:
                self.device_nodes.append(node)
        for mount in edits.get("mounts") or []:
            if mount not in self.mounts:
                self.mounts.append(mount)
        self.env.extend(e for e in edits.get("env") or [] if e not in self.env)


def load_specs(cdi_dir: Path) -> dict[str, tuple[JSON, JSON]]:
    """Fully qualified CDI device id -> (its spec, the device), from every spec file."""
    devices: dict[str, tuple[JSON, JSON]] = {}
    for path in sorted(cdi_dir.glob("*")):
        if path.suffix not in (".json", ".yaml", ".yml"):
            continue
        try:
            spec = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
        except (OSError, ValueError, yaml.YAMLError) as exc:
            log.warning("CDI spec %s unreadable: %s", path, exc)
            continue
        for device in spec.get("devices") or []:
            devices[f"{spec['kind']}={device['name']}"] = (spec, device)
    return devices


def resolve_cdi(ids: list[str], cdi_dir: Path, host_path: Callable[[str], Path]) -> ContainerEdits:
    """The container edits of `ids`; every host path must exist on the node."""
    specs = load_specs(cdi_dir)
    edits = ContainerEdits()
    applied: list[int] = []
    for cdi_id in ids:
        if cdi_id not in specs:
            raise CdiError(f"unresolvable CDI devices {cdi_id}")
        spec, device = specs[cdi_id]
        if id(spec) not in applied:  # a spec's own edits once, whichever of its devices
            applied.append(id(spec))
            edits.add(spec.get("containerEdits") or {})
        edits.add(device.get("containerEdits") or {})
    for entry in edits.device_nodes + edits.mounts:
        source = entry.get("hostPath") or entry.get("path")
        if not host_path(source).exists():
            raise CdiError(f"CDI edit names {source}, which does not exist on the node")
    return edits
