"""DRA mode's /prioritize: the candidate nodes ranked fullest first, so a burst of DCU pods
fills one node before it opens the next ("as few nodes as fit", as in device-plugin mode).
Pure: fullness in (drausage.py), HostPriorityList out.

kube-scheduler's own scoring cannot do this: NodeResourcesFit sees no claim, and its DRA
extended-resource path counts whole devices, not the shares consumable capacity hands out;
the DynamicResources plugin scores only prioritized-list alternatives. So the extender ranks.

Scores are ranks, not fractions: the fullest node gets 10, the next 9, and so on (never below
0), equal fullness in name order. kube-scheduler takes the best total and breaks ties at
random, so a fraction score would leave the empty nodes of a burst tied and spread pods over
them; and the extender sees an allocation only once the claim's status is written, a little
after kube-scheduler chose, so the pods of a burst all see the same fullness. A strict order
sends them all to the same node until kube-scheduler's own DRA filter finds it full.
"""

from __future__ import annotations

from typing import Any

MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority


def pack(candidates: list[str], fullness: dict[str, float]) -> list[dict[str, Any]]:
    """HostPriorityList for `candidates`. Nodes the usage knows nothing of (no slice of our
    driver seen) count as empty. With no fullness at all (the view not filled yet) every score
    is 0: nothing to steer by, kube-scheduler's own scores decide."""
    if not fullness:
        return [{"Host": name, "Score": 0} for name in candidates]
    order = sorted(dict.fromkeys(candidates), key=lambda name: (-fullness.get(name, 0.0), name))
    rank = {name: position for position, name in enumerate(order)}
    return [{"Host": name, "Score": max(0, MAX_SCORE - rank[name])} for name in candidates]
