"""The kubelet stand-in follows its node's pods as a kubelet's reflector does: one list, then
watches resumed from the last version seen, a new list only when a watch fails. It listed again
at the end of every 2-second watch, a pod list per node every 2 s that the 20-node bench counted
against every DCU pod (LIST pods 1.7 per pod where the device plugin makes 1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hami_dcu.cli.localcluster.kubelet import LocalKubelet
from hami_dcu.common.io.kube import GoneError

JSON = dict[str, Any]


class Listed:
    def __init__(self, items: list[JSON], resource_version: str) -> None:
        self.items = items
        self.resource_version = resource_version


def running(name: str, version: str) -> JSON:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": version},
            "status": {"phase": "Running"}}


class ScriptedKube:
    """Answers the pod list and watches from a script; the last watch stops the kubelet."""

    def __init__(self, kubelet_stop: list[LocalKubelet], watches: list[list[JSON] | Exception]) -> None:
        self.calls: list[tuple[str, str | None]] = []
        self.watches = watches
        self.kubelet_stop = kubelet_stop

    def list_pods(self, field_selector: str | None = None, **_: Any) -> Listed:
        self.calls.append(("list", field_selector))
        return Listed([], str(100 * (1 + sum(call[0] == "list" for call in self.calls))))

    def watch_pods(self, resource_version: str, timeout_seconds: int = 300, field_selector: str | None = None,
                   **_: Any) -> Iterator[JSON]:
        self.calls.append(("watch", resource_version))
        script = self.watches.pop(0)
        if not self.watches:
            self.kubelet_stop[0]._stopping.set()
        if isinstance(script, Exception):
            raise script
        yield from script


def run_loop(tmp_path: Path, watches: list[list[JSON] | Exception]) -> list[tuple[str, str | None]]:
    holder: list[LocalKubelet] = []
    kube = ScriptedKube(holder, watches)
    kubelet = LocalKubelet(kube, "node0", tmp_path)  # type: ignore[arg-type]
    kubelet._stopping.wait = lambda timeout=None: False  # type: ignore[method-assign]
    holder.append(kubelet)
    kubelet._pod_loop()
    return kube.calls


def test_watches_resume_from_the_last_version_without_listing_again(tmp_path: Path) -> None:
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "240"}}}
    calls = run_loop(tmp_path, [[{"type": "MODIFIED", "object": running("a", "230")}, bookmark],
                                [],  # a watch that ends with nothing new
                                []])
    assert calls == [("list", "spec.nodeName=node0"), ("watch", "200"), ("watch", "240"), ("watch", "240")]


def test_a_failed_watch_lists_again(tmp_path: Path) -> None:
    calls = run_loop(tmp_path, [[{"type": "MODIFIED", "object": running("a", "230")}],
                                GoneError(410, "Expired", "too old resource version: 230"),
                                []])
    assert calls == [("list", "spec.nodeName=node0"), ("watch", "200"), ("watch", "230"),
                     ("list", "spec.nodeName=node0"), ("watch", "300")]
