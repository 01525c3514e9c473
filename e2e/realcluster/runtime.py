"""A container runtime for the chart's own pods, without images: each container of hami-dcu's
image runs the installed `hami-dcu` command, and the bundled kube-scheduler container runs the
kube-scheduler built from Go modules, both as they would in the pod:

* in the pod's own network namespace (its own loopback, its pod IP on the bridge);
* in a private mount namespace where every volume is bind-mounted at its `mountPath`
  (read-only where the pod says so): Secrets and ConfigMaps fetched with the node's identity
  (group-owned by the pod's fsGroup, as the kubelet does, and the processes in that group),
  hostPaths under the node's own root directory, the projected ServiceAccount token obtained
  with the TokenRequest API bound to the pod, as a kubelet does;
* with the pod's env (field references resolved), `runAsUser`, and in-cluster configuration
  (`KUBERNETES_SERVICE_HOST/PORT` name the apiserver directly: there is no kube-proxy).

Init containers of these images run to their end first, as a kubelet runs them.
Tenant containers (any other image) are not run: the kubelet stand-in only allocates their
devices. What is not modelled: image filesystems, `readOnlyRootFilesystem`, capabilities,
liveness probes, resource limits.
"""

from __future__ import annotations

import base64
import logging
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.realcluster.network import PodNetwork
from e2e.realcluster.processes import Process
from hami_dcu.common.io.kube import Kube

log = logging.getLogger(__name__)
JSON = dict[str, Any]
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class Images:
    """Which images this runtime can run, and with what."""

    hami_dcu: str  # image repository of hami-dcu, e.g. "hami-dcu"
    kube_scheduler: str  # image repository of the bundled kube-scheduler
    kube_version: str  # the only kube-scheduler tag we have a binary for
    binaries: Path
    # Other projects' images (a peer's chart, e.g. HAMi's): repository -> what stands for the
    # image's entrypoint. A container's `command` replaces the entrypoint, so its first word
    # (the binary's name in that image) is dropped and the rest follows it, then `args`.
    peers: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def argv(self, container: JSON) -> list[str] | None:
        repository, _, tag = container["image"].rpartition(":")
        command = list(container.get("command") or [])
        args = list(container.get("args") or [])
        if repository == self.hami_dcu:
            # The image's ENTRYPOINT is ["hami-dcu"]; `command` replaces it.
            return (command or [str(Path(sys.executable).parent / "hami-dcu")]) + args
        if repository == self.kube_scheduler:
            if tag != self.kube_version:
                raise RuntimeError(f"no kube-scheduler {tag} here (built: {self.kube_version})")
            if not command or Path(command[0]).name != "kube-scheduler":
                raise RuntimeError(f"kube-scheduler container runs {command!r}, not kube-scheduler")
            return [str(self.binaries / "kube-scheduler"), *command[1:], *args]
        for peer, entrypoint in self.peers:
            if repository == peer:
                return [*entrypoint, *command[1:], *args]
        return None


@dataclass
class RunningPod:
    uid: str
    namespace: str
    name: str
    netns: str
    ip: str
    root: Path
    containers: dict[str, Process] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    restart_due: dict[str, float] = field(default_factory=dict)  # container -> monotonic time


class PodRuntime:
    def __init__(self, kube: Kube, node: str, node_root: Path, host_paths: dict[str, Path], network: PodNetwork,
                 images: Images, apiserver: tuple[str, int]) -> None:
        self.kube = kube  # the node's identity: it may read only what its pods reference
        self.node = node
        self.node_root = node_root
        self.host_paths = host_paths  # hostPath -> directory, for paths that must be short (sockets)
        self.network = network
        self.images = images
        self.apiserver = apiserver

    def runnable(self, pod: JSON) -> bool:
        return any(self.images.argv(c) is not None for c in pod["spec"]["containers"])

    # --- volumes -------------------------------------------------------------------------

    def _volume_dirs(self, pod: JSON, root: Path) -> dict[str, Path]:
        meta, spec = pod["metadata"], pod["spec"]
        dirs: dict[str, Path] = {}
        for volume in spec.get("volumes") or []:
            name = volume["name"]
            target = root / "volumes" / name
            if "hostPath" in volume:
                dirs[name] = self._host_path(volume["hostPath"])
                continue
            target.mkdir(parents=True, exist_ok=True)
            target.chmod(0o755)
            if "secret" in volume:
                secret = self.kube.request("GET", f"/api/v1/namespaces/{meta['namespace']}/secrets/"
                                                  f"{volume['secret']['secretName']}")
                files = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
                self._write(target, files, volume["secret"].get("defaultMode", 0o644))
            elif "configMap" in volume:
                config = self.kube.request("GET", f"/api/v1/namespaces/{meta['namespace']}/configmaps/"
                                                  f"{volume['configMap']['name']}")
                files = {k: v.encode() for k, v in (config.get("data") or {}).items()}
                self._write(target, files, volume["configMap"].get("defaultMode", 0o644))
            elif "projected" in volume:
                self._write(target, self._projected(pod, volume["projected"]),
                            volume["projected"].get("defaultMode", 0o644))
            elif "emptyDir" in volume:
                target.chmod(0o777)
            else:
                raise RuntimeError(f"pod {meta['namespace']}/{meta['name']}: volume {name} of an unsupported type")
            fs_group = (spec.get("securityContext") or {}).get("fsGroup")
            if fs_group is not None and "emptyDir" not in volume:
                _group_own(target, int(fs_group))
            dirs[name] = target
        return dirs

    def _host_path(self, host_path: JSON) -> Path:
        path = host_path["path"]
        if path in self.host_paths:
            return self.host_paths[path]
        local = self.node_root / path.lstrip("/")
        if host_path.get("type") == "Directory" and not local.is_dir():
            raise RuntimeError(f"hostPath {path} is not a directory on node {self.node}")
        local.mkdir(parents=True, exist_ok=True)
        return local

    @staticmethod
    def _write(target: Path, files: dict[str, bytes], mode: int) -> None:
        for key, data in files.items():
            path = target / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(mode)

    def _projected(self, pod: JSON, projected: JSON) -> dict[str, bytes]:
        meta, spec = pod["metadata"], pod["spec"]
        files: dict[str, bytes] = {}
        for source in projected.get("sources") or []:
            if "serviceAccountToken" in source:
                request = source["serviceAccountToken"]
                review = self.kube.request(
                    "POST",
                    f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{spec['serviceAccountName']}/token",
                    body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
                        "audiences": [request["audience"]] if request.get("audience") else [],
                        "expirationSeconds": request.get("expirationSeconds", 3607),
                        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                           "uid": meta["uid"]}}})
                files[request["path"]] = review["status"]["token"].encode()
            elif "configMap" in source:
                config = self.kube.request("GET", f"/api/v1/namespaces/{meta['namespace']}/configmaps/"
                                                  f"{source['configMap']['name']}")
                for item in source["configMap"].get("items") or [{"key": k, "path": k} for k in config["data"]]:
                    files[item["path"]] = config["data"][item["key"]].encode()
            elif "downwardAPI" in source:
                for item in source["downwardAPI"].get("items") or []:
                    files[item["path"]] = str(_field(pod, item["fieldRef"]["fieldPath"], "")).encode()
        return files

    # --- containers ----------------------------------------------------------------------

    def start(self, pod: JSON, workdir: Path) -> RunningPod:
        meta = pod["metadata"]
        netns, ip = self.network.add_pod()
        running = RunningPod(meta["uid"], meta["namespace"], meta["name"], netns, ip, workdir)
        try:
            dirs = self._volume_dirs(pod, workdir)
            for container in pod["spec"].get("initContainers") or []:
                if self.images.argv(container) is not None:
                    self._run_to_completion(pod, running, container, dirs)
            for container in pod["spec"]["containers"]:
                if self.images.argv(container) is not None:
                    running.containers[container["name"]] = self._launch(pod, running, container, dirs)
                    running.restarts[container["name"]] = 0
        except BaseException:
            self.stop(running, grace=0)
            raise
        return running

    def _run_to_completion(self, pod: JSON, running: RunningPod, container: JSON, dirs: dict[str, Path],
                           timeout: float = 60.0) -> None:
        """An init container, as a kubelet runs it: to its end, before the pod's containers; a
        failure leaves the pod not started (the kubelet stand-in tries again)."""
        process = self._launch(pod, running, container, dirs)
        deadline = time.monotonic() + timeout
        while process.exit_code() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        code = process.exit_code()
        if code != 0:
            process.stop(grace=0.1)
            raise RuntimeError(f"init container {container['name']} of {running.namespace}/{running.name} "
                               f"{'timed out' if code is None else f'exited with {code}'}:\n{process.tail(10)}")

    def restart(self, pod: JSON, running: RunningPod, container: JSON) -> None:
        dirs = self._volume_dirs(pod, running.root)
        running.containers[container["name"]] = self._launch(pod, running, container, dirs)
        running.restarts[container["name"]] += 1

    def _launch(self, pod: JSON, running: RunningPod, container: JSON, dirs: dict[str, Path]) -> Process:
        argv = self.images.argv(container)
        assert argv is not None
        mounts: list[str] = []
        for mount in container.get("volumeMounts") or []:
            source, target = dirs[mount["name"]], mount["mountPath"]
            if mount.get("subPath"):
                source = source / mount["subPath"]
            # Mount points are created on the host's root filesystem (empty directories, or
            # empty files for a file's subPath); what is mounted on them is visible only inside
            # this pod's mount namespace.
            point = f"mkdir -p {shlex.quote(target)}" if source.is_dir() else \
                f"mkdir -p {shlex.quote(str(Path(target).parent))} && touch {shlex.quote(target)}"
            mounts.append(f"{point} && mount --bind {shlex.quote(str(source))} {shlex.quote(target)}")
            if mount.get("readOnly"):
                mounts.append(f"mount -o remount,bind,ro {shlex.quote(target)}")
        user = _run_as_user(pod, container)
        fs_group = (pod["spec"].get("securityContext") or {}).get("fsGroup")
        groups = f"--groups={int(fs_group)}" if fs_group is not None else "--clear-groups"
        drop = f"setpriv --reuid={user} --regid={user} {groups} " if user else ""
        # The pod's own hostname, as in a real pod (kube-scheduler names its leader lease holder by it).
        hostname = f"hostname {shlex.quote(running.name[:63])}"
        script = " && ".join([hostname, *mounts, f'exec {drop}"$@"'])
        wrapper = ["ip", "netns", "exec", running.netns, "unshare", "--mount", "--uts", "--propagation", "private",
                   "--", "sh", "-c", script, "sh", *argv]
        log_file = running.root / "logs" / f"{container['name']}.log"
        process = Process(f"{running.namespace}/{running.name}/{container['name']}", wrapper, log_file,
                          env=self._env(pod, running, container), cwd=Path("/"))
        log.info("node %s: starting %s: %s", self.node, process.name, " ".join(argv))
        return process.start()

    def _env(self, pod: JSON, running: RunningPod, container: JSON) -> dict[str, str]:
        host, port = self.apiserver
        venv_bin = str(Path(sys.executable).parent)
        env = {
            "PATH": f"{venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/tmp",
            "HOSTNAME": running.name,
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": str(port),
            # What the image's Dockerfile sets.
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "GRPC_VERBOSITY": "ERROR",
        }
        for var in container.get("env") or []:
            if "value" in var:
                env[var["name"]] = var["value"]
            elif "fieldRef" in (var.get("valueFrom") or {}):
                path = var["valueFrom"]["fieldRef"]["fieldPath"]
                env[var["name"]] = running.ip if path == "status.podIP" else str(_field(pod, path, ""))
        return env

    def stop(self, running: RunningPod, grace: float) -> None:
        for process in running.containers.values():
            process.stop(grace=max(grace, 0.1))
        self.network.remove_pod(running.netns)
        shutil.rmtree(running.root / "volumes", ignore_errors=True)


def _field(obj: JSON, path: str, default: object) -> object:
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return default
        value = value[part]
    return value


def _group_own(target: Path, group: int) -> None:
    """fsGroup as the kubelet applies it to a read-only volume (SetVolumeOwnership): group-owned
    by it, group-readable; a 0400 Secret file becomes 0440 root:fsGroup."""
    for path in [target, *target.rglob("*")]:
        os.lchown(path, -1, group)
        path.chmod(path.stat().st_mode | (0o2550 if path.is_dir() else 0o440))


def _run_as_user(pod: JSON, container: JSON) -> int | None:
    for context in (container.get("securityContext") or {}, pod["spec"].get("securityContext") or {}):
        if "runAsUser" in context:
            user = int(context["runAsUser"])
            return user or None
    return None


def unavailable() -> str | None:
    for tool in ("setpriv", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"real cluster: `{tool}` (util-linux) is missing"
    if os.geteuid() != 0:
        return "real cluster: the pod runtime needs root (network and mount namespaces)"
    return None
