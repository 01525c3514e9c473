"""NetworkPolicy enforced on the kind cluster, for the NetworkPolicy test: kube-router's firewall
(no routing, no service proxy) as a DaemonSet over the node image's small CNI, and the probes a
pod runs to see which ports it reaches.

kube-router leaves its iptables chains and ipsets behind when its pods go; `uninstall` takes
them off every node, so the tests after this one meet the cluster as it was.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from e2e.kindcluster import KindBackend
from e2e.scenarios import wait_until
from hami_dcu.cli.localcluster.pods import POD_IMAGE

JSON = dict[str, Any]
NAME = "hami-e2e-kube-router"
NAMESPACE = "kube-system"
LABELS = {"app.kubernetes.io/name": NAME}


def manifests(image: str) -> list[JSON]:
    """ServiceAccount, what kube-router's firewall reads, and the DaemonSet on every node."""
    meta = {"name": NAME, "namespace": NAMESPACE, "labels": LABELS}
    reads = [
        {"apiGroups": [""], "resources": ["pods", "namespaces", "nodes", "services", "endpoints"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
    ]
    container = {
        "name": "kube-router",
        "image": image,
        "imagePullPolicy": "Never",
        "args": ["--run-router=false", "--run-firewall=true", "--run-service-proxy=false",
                 "--health-port=20244", "-v=1"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "securityContext": {"privileged": True},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 20244}, "periodSeconds": 2},
        "volumeMounts": [{"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": True},
                         {"name": "xtables-lock", "mountPath": "/run/xtables.lock"}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": NAME, "labels": LABELS}, "rules": reads},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": NAME, "labels": LABELS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta, "spec": {
            "selector": {"matchLabels": LABELS},
            "template": {"metadata": {"labels": LABELS}, "spec": {
                "serviceAccountName": NAME, "hostNetwork": True, "hostPID": True,
                "priorityClassName": "system-node-critical",
                "tolerations": [{"operator": "Exists"}],
                "containers": [container],
                "volumes": [{"name": "lib-modules", "hostPath": {"path": "/lib/modules"}},
                            {"name": "xtables-lock", "hostPath": {"path": "/run/xtables.lock",
                                                                  "type": "FileOrCreate"}}],
            }},
        }},
    ]


def _documents(image: str) -> str:
    return "\n".join(json.dumps(m) for m in manifests(image))


def install(backend: KindBackend) -> None:
    image = backend.world.kube_router_image
    backend.cluster.load_docker_image(image)
    subprocess.run([str(backend.world.kubectl), "--kubeconfig", backend.kubeconfig, "apply", "-f", "-"],
                   input=_documents(image), text=True, capture_output=True, check=True, timeout=120)
    backend.kubectl("rollout", "status", "-n", NAMESPACE, f"daemonset/{NAME}", "--timeout=180s", timeout=200)


# kube-router's own --cleanup-config (v2.1.0) reports success and leaves every rule in place on
# these nodes (iptables-nft); its chains and sets are taken out here instead, node by node.
_CHAINS = "KUBE-ROUTER-|KUBE-NWPLCY-|KUBE-POD-FW-"
_IPTABLES_CLEANUP = f"""
for chain in INPUT FORWARD OUTPUT; do
    iptables -S "$chain" | grep -- '-j KUBE-ROUTER-' | sed 's/^-A/-D/' | while read -r rule; do
        eval iptables "$rule"
    done
done
chains=$(iptables -S | awk '/^-N ({_CHAINS})/ {{print $2}}')
for chain in $chains; do iptables -F "$chain"; done
for chain in $chains; do iptables -X "$chain"; done
iptables -S | grep -cE -- '{_CHAINS}' || true
"""


def uninstall(backend: KindBackend) -> None:
    """The DaemonSet gone, then its iptables chains and ipsets off every node; raises when any
    chain is left (a later test would meet a policy it does not expect)."""
    image = backend.world.kube_router_image
    subprocess.run([str(backend.world.kubectl), "--kubeconfig", backend.kubeconfig, "delete", "--wait=true",
                    "--ignore-not-found", "-f", "-"],
                   input=_documents(image), text=True, capture_output=True, check=False, timeout=180)
    backend.kubectl("wait", "--for=delete", "pod", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={NAME}",
                    "--timeout=120s", timeout=150)
    left = {}
    for node in backend.kubectl("get", "nodes", "-o", "name").split():
        container = node.removeprefix("node/")
        count = backend.node_exec(container, "sh", "-c", _IPTABLES_CLEANUP).strip().splitlines()
        # The node image has no ipset binary: kube-router's image, in the node's network namespace.
        subprocess.run(["docker", "run", "--rm", "--privileged", "--network", f"container:{container}",
                        "--entrypoint", "ipset", image, "destroy"], capture_output=True, check=False, timeout=60)
        if count and count[-1] != "0":
            left[container] = count[-1]
    if left:
        raise AssertionError(f"kube-router's iptables chains left on nodes: {left}")


def prober(name: str, namespace: str) -> JSON:
    """A pod that only sleeps: the probes run in it with kubectl exec."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": POD_IMAGE, "imagePullPolicy": "IfNotPresent",
                                     "command": ["sleep", "infinity"]}]}}


def reaches(backend: KindBackend, namespace: str, pod: str, address: str, port: int) -> bool:
    """Whether a TCP connection from the pod to address:port opens within 3 s."""
    # busybox nc: exit 0 once connected (stdin is empty, so it ends at once), 1 when refused or
    # when nothing answers within -w (a policy that drops).
    script = f"nc -w 3 {address} {port} </dev/null && echo open || echo closed"
    out = backend.kubectl("exec", "-n", namespace, pod, "--", "sh", "-c", script, timeout=60)
    return out.strip().endswith("open")


def wait_reachability(backend: KindBackend, namespace: str, pod: str, address: str, port: int,
                      expected: bool, timeout: float = 120) -> None:
    wait_until(f"{namespace}/{pod} -> {address}:{port} {'open' if expected else 'closed'}",
               lambda: reaches(backend, namespace, pod, address, port) == expected, timeout=timeout, interval=1)
