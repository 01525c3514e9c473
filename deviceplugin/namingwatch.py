"""The device plugin's start-up look for components of the other naming set on its own node
(common/protocol/namingcheck.py): its Node and the pods bound to it, a log line and a Warning event
on the node. Only the own node: a look at the whole cluster from every plugin would cost
one cluster-wide list per node at each rollout."""

from __future__ import annotations

import logging

from hami_dcu.common.io.kube import Kube, KubeError
from hami_dcu.common.protocol.keys import Naming
from hami_dcu.common.protocol.namingcheck import EVENT_REASON, find_traces, report

log = logging.getLogger(__name__)


def check_node_naming(kube: Kube, node: str, naming: Naming) -> str | None:
    """The mismatch message, None when the node shows nothing of the other set."""
    try:
        found = kube.get_node(node)
        pods = kube.list_pods(field_selector=f"spec.nodeName={node}").items
    except KubeError as exc:
        log.warning("node %s: could not look for components of the other naming set: %s", node, exc)
        return None
    traces = find_traces([found], pods, naming)
    if not traces:
        return None
    message = report("device plugin", naming, traces)
    log.warning("node %s: %s", node, message)
    try:
        kube.create_event({"kind": "Node", "metadata": {"name": node}}, EVENT_REASON, message, "Warning",
                          component="hami-dcu-device-plugin")
    except KubeError as exc:
        log.warning("node %s: could not record the naming mismatch: %s", node, exc)
    return message
