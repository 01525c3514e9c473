"""What the envelope schemas cost per request, against decoding the same JSON.

    python bench/envelopes.py [--seconds 0.5]

For each envelope (the webhook's AdmissionReview as bench/webhook.py sends it, /filter's
ExtenderArgs naming 5,000 nodes, /bind's ExtenderBindingArgs, /preempt's
ExtenderPreemptionArgs with 3 victims on each of 10 nodes, a DRA claim record), in this
process: CPU time per call of json.loads alone (the baseline: what any handler must pay)
and of the real parse (bounded JSON decode + schema load), the best of 5 repeats, and
their ratio. CPU time, not wall time, so other work on a shared machine counts less.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from benchlib import ratio_line

from hami_dcu.common.protocol import safejson
from hami_dcu.dra.records import PreparedClaim, PreparedDevice, VdevGrant, decode, encode
from hami_dcu.scheduler.extender import parse_bind_args, parse_filter_args, parse_preemption_args
from hami_dcu.webhook.schemas import load_review
from webhook import REVIEW

POD = REVIEW["request"]["object"]
FILTER = {"Pod": POD, "NodeNames": [f"node-{i:04d}" for i in range(5000)]}
BIND = {"PodName": "bench", "PodNamespace": "default", "PodUID": "6d1b7c4e-0b5e-4c55-9d0e-3b1f1c0f9a11",
        "Node": "node-0001"}
PREEMPT = {"Pod": POD, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
    f"node-{n:04d}": {"Pods": [{"UID": f"victim-{n}-{v}"} for v in range(3)], "NumPDBViolations": 0}
    for n in range(10)}}
RECORD = PreparedClaim(uid="6d1b7c4e-claim", namespace="default", name="bench-dcu", devices=(PreparedDevice(
    request="dcu", pool="node-0001", device="dcu-0", share_id="4f1c", pci_bus_id="0000:3D:00.0",
    dri_card="/dev/dri/card0", dri_render="/dev/dri/renderD128",
    vdev=VdevGrant(card_index=0, cu_mask=(1 << 18) - 1, pipe=0, vdev=0, cu_count=18, memory_mib=2000)),))


def per_call_us(fn: Callable[[], object], seconds: float) -> float:
    """Best of 5 repeats of about `seconds` / 5 each, in µs of this process's CPU per call."""
    timer = timeit.Timer(fn, timer=time.process_time)
    number, _ = timer.autorange()
    number = max(1, int(number * seconds / 5 / 0.2))
    return min(timer.repeat(repeat=5, number=number)) / number * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=0.5, help="CPU seconds per figure, about")
    args = parser.parse_args()
    review = json.dumps(REVIEW).encode()
    cases: list[tuple[str, bytes, Callable[[bytes], object]]] = [
        ("AdmissionReview", review, load_review),
        ("ExtenderArgs, 5,000 names", json.dumps(FILTER).encode(), lambda b: parse_filter_args(safejson.loads(b))),
        ("ExtenderBindingArgs", json.dumps(BIND).encode(), lambda b: parse_bind_args(safejson.loads(b))),
        ("ExtenderPreemptionArgs", json.dumps(PREEMPT).encode(), lambda b: parse_preemption_args(safejson.loads(b))),
        ("DRA claim record", encode(RECORD).encode(), decode),
    ]
    print("envelopes: CPU per call, json.loads alone (baseline) vs bounded decode + schema load; best of 5")
    for label, body, parse in cases:
        parse(body)  # fails loudly here if the fixture is not a valid envelope
        ours = per_call_us(lambda parse=parse, body=body: parse(body), args.seconds)
        base = per_call_us(lambda body=body: json.loads(body), args.seconds)
        print(ratio_line(label, ours, base, unit="us"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
