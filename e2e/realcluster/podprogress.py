"""When each pod of a burst was bound and when it was Running, as one watch shows it.

The benchmarks used to poll: a list of the burst's pods every 50-200 ms. On one 2-core machine
that polling was a real share of the load it measured (the list decoded in the harness, and
served by kube-apiserver, several times a second, growing with the burst and its duration), and
its period was the resolution of every figure (0.2 s of a 2-second baseline). A watch costs an
event per change and stamps each change when it arrives.
"""

from __future__ import annotations

import threading
import time

from hami_dcu.common.io.kube import GoneError, Kube, KubeError

BOUND, RUNNING = "bound", "Running"


class PodProgress:
    """Follows the pods matching `label_selector` in `namespace` from its own thread, from
    `start` to `stop`, stamping on the monotonic clock when each was first seen bound and
    first seen Running."""

    def __init__(self, kube: Kube, namespace: str, label_selector: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.label_selector = label_selector
        self._stamps: dict[str, dict[str, float]] = {BOUND: {}, RUNNING: {}}
        self._nodes: dict[str, str] = {}
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._listed = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"pod-progress-{label_selector}", daemon=True)

    def start(self, timeout: float = 30.0) -> PodProgress:
        """Returns once the watch has listed: every change after it is stamped."""
        self._thread.start()
        if not self._listed.wait(timeout):
            raise TimeoutError(f"pods {self.label_selector} in {self.namespace}: not listed in {timeout:.0f} s")
        return self

    def stop(self) -> None:
        self._stop.set()

    def when_all(self, what: str, pods: int, deadline: float) -> float | None:
        """The monotonic time the `pods`-th pod became `what` (BOUND or RUNNING), waiting until
        then or until `deadline` (monotonic); None at the deadline."""
        with self._changed:
            while len(self._stamps[what]) < pods:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(min(left, 1.0))
            return sorted(self._stamps[what].values())[pods - 1]

    def count(self, what: str) -> int:
        with self._changed:
            return len(self._stamps[what])

    def nodes(self) -> set[str]:
        """The nodes the followed pods were bound to."""
        with self._changed:
            return set(self._nodes.values())

    def _see(self, pod: dict, at: float) -> None:
        name = pod["metadata"]["name"]
        node = (pod.get("spec") or {}).get("nodeName")
        with self._changed:
            if node:
                self._nodes[name] = node
                self._stamps[BOUND].setdefault(name, at)
            if (pod.get("status") or {}).get("phase") == RUNNING:
                self._stamps[RUNNING].setdefault(name, at)
            self._changed.notify_all()

    def _follow(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        while not self._stop.is_set():
            try:
                listed = self.kube.request("GET", path, query={"labelSelector": self.label_selector})
                for pod in listed.get("items") or []:
                    self._see(pod, time.monotonic())
                self._listed.set()
                version = listed["metadata"]["resourceVersion"]
                while not self._stop.is_set():
                    for event in self.kube.watch(path, version, 30, label_selector=self.label_selector):
                        if self._stop.is_set():
                            return
                        version = event["object"]["metadata"].get("resourceVersion") or version
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self._see(event["object"], time.monotonic())
            except GoneError:
                continue  # list again: what changed meanwhile is stamped when the list shows it
            except KubeError:
                time.sleep(0.2)
