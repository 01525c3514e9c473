"""What one `/bind` attempt is and how it can end, shared by the binder (bind.py) and its
node-lock half (bindlock.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from hami_dcu.common.io.kube import AsyncKube, KubeError, NotFoundError
from hami_dcu.common.io.nodelock import DEFAULT_BIND_WINDOW
from hami_dcu.common.protocol.errors import SchedulerError
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.cacherecords import Assumption
from hami_dcu.scheduler.extender import BindArgs

JSON = dict[str, Any]


class BindError(SchedulerError, RuntimeError):
    """Why a bind failed, in words for the pod's event and the extender's Error."""


@dataclass(frozen=True)
class BindSettings:
    lock_timeout: timedelta = timedelta(seconds=300)  # a lock older than this is expired
    lock_wait: float = 20.0  # how long a bind may wait for a node, queue and lock together
    settle_wait: float = 2.0  # how long to wait for the watches before listing the node's pods
    poll: float = 0.01  # cache polling interval while waiting, when no informer wakes us
    # A lock whose holder is still unbound after this long was left by a bind that died.
    bind_window: timedelta = DEFAULT_BIND_WINDOW
    sweep_interval: float = 5.0  # how often locks older than the bind window are judged
    # How long a lock whose holder the watch shows done is left to the device plugin, which
    # releases it beside the pod's outcome, before the extender releases it itself.
    plugin_release_grace: float = 1.0
    # /filter waits while the binds in flight would take longer than this share of lock_wait
    # to end at the pace binds end (bindpace.py; 0: never waits), letting `pace_floor` through.
    pace_share: float = 0.25
    pace_floor: int = 8
    # One node's queue of binds may take this share of lock_wait at that node's own pace
    # (nodepace.py): half leaves room for a node slowing down after its binds were queued.
    node_pace_share: float = 0.5


class AlreadyBound(SchedulerError):
    """The pod turned out bound by another attempt: answer from the pod itself."""

    def __init__(self, pod: JSON) -> None:
        super().__init__("pod already bound")
        self.pod = pod


@dataclass
class Attempt:
    """One /bind attempt. Its identity on the node is the exact lock value it wrote."""

    args: BindArgs
    deadline: float  # monotonic: the attempt stops waiting for the node here
    assumption: Assumption | None = None  # the placement this attempt carries out
    lock_value: str | None = None  # written, or possibly written, by this attempt
    api_calls: int = 0
    contended: bool = False
    waiting_logged: bool = False  # "waiting for the node lock" is said once per attempt
    waited_for_holder: bool = False  # the node's lock was held by another bind when this one came
    bound_here: bool = False  # this attempt's Binding put the pod on the node (not an earlier one's)


async def read_pod(kube: AsyncKube, attempt: Attempt) -> JSON:
    """The pod as the API holds it now (one round trip, counted on the attempt)."""
    args = attempt.args
    attempt.api_calls += 1
    try:
        return await kube.get_pod(args.namespace, args.pod_name)
    except NotFoundError as exc:
        raise BindError(f"pod {args.pod} not found") from exc
    except KubeError as exc:
        raise BindError(f"cannot read pod {args.pod}: {exc}") from exc


def check_current(cache: ClusterCache, attempt: Attempt) -> None:
    """A newer /filter for the pod replaced this attempt's placement (kube-scheduler gave
    up on this bind and scheduled the pod again), or the pod went away: stop here."""
    assumption = attempt.assumption
    if assumption is not None and not cache.placements.is_current(assumption):
        raise BindError(f"superseded: the placement of {attempt.args.pod} on node {attempt.args.node} was "
                        "dropped (a newer scheduling attempt, or the pod went away)")
