"""Pods Volcano places are not the extender's to act on (pure).

In Volcano mode (`--volcano-scheduler-name`), Volcano's Hygon deviceshare chooses the cards of
the pods with that schedulerName, writes their allocation and binds them itself. kube-scheduler
sends the extender only the pods of its own profiles, so such a pod reaches /filter, /bind or
/preemption only through a misconfiguration (a kube-scheduler profile of the same name); were
the extender to act then, two schedulers would place one pod, each with its own cards. So it
refuses instead, saying why.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def volcano_owned(pod: JSON, volcano_scheduler: str) -> str | None:
    """Why the extender leaves `pod` alone (it is Volcano's), or None when it may act."""
    if not volcano_scheduler:
        return None
    scheduler = (pod.get("spec") or {}).get("schedulerName")
    if scheduler != volcano_scheduler:
        return None
    return (f"schedulerName {scheduler}: Volcano places this pod and writes its allocation; hami-dcu's extender "
            "does not act on it (a kube-scheduler profile of that name would make two schedulers place it)")
