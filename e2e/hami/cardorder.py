"""HAMi v2.10's card order, from HAMi's own code, beside hami-dcu's (issue 33).

`cardorder_probe_test.go.txt` is a Go test of ours. `hami_cases` copies it into HAMi's source
tree as pkg/scheduler/zz_hamidcu_cardorder_test.go and runs it with `go test`. The tree is the
one e2e/upstream/build-hami.sh extracts and keeps beside the built scheduler, in the per-user
cache. The test places a fixed, seeded set of random DCU pods on random nodes of 1-12 cards
with HAMi's scoreNode and writes each case, with HAMi's picks, as one JSON line. `ours` places
the same pod with hami_dcu.scheduler.fit.fit_pod. The first run compiles HAMi's pkg/scheduler
tests: about 7 minutes on 2 busy cores with an empty Go build cache, 20 s where its dependencies
are compiled already; later runs take seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from e2e.realcluster import hami, upstream
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.counting import StartOrder, Usage
from hami_dcu.common.protocol.requests import DcuRequest
from hami_dcu.scheduler import policy
from hami_dcu.scheduler.fit import CardSpec, PodFit, Selection, fit_pod

PROBE = Path(__file__).with_name("cardorder_probe_test.go.txt")
PROBE_IN_TREE = Path("pkg") / "scheduler" / "zz_hamidcu_cardorder_test.go"
TEST = "TestHamiDcuCardOrder"
OUT_ENV = "HAMI_DCU_CARDORDER_OUT"
# The probe's cards: 8 slots, 65,520 MiB, 100% each; a share holds 1,000 MiB and 10% of one.
SLOTS, MEMORY, CORES, SHARE_MEMORY, SHARE_CORES = 8, 65520, 100, 1000, 10
Case = dict[str, Any]


def hami_tree() -> Path:
    """HAMi's extracted source tree, building HAMi's scheduler first if needed."""
    return hami.binary().parent / "src"


def hami_cases(out: Path, timeout: float = 3600.0) -> list[Case]:
    """Runs the probe in HAMi's tree, writing its cases to `out`; returns them."""
    tree = hami_tree()
    target = tree / PROBE_IN_TREE
    with tempfile.NamedTemporaryFile("wb", dir=target.parent, delete=False) as staged:
        staged.write(PROBE.read_bytes())
    os.replace(staged.name, target)  # whole, even beside a concurrent run
    log = out.with_suffix(".log")
    started = time.monotonic()
    upstream.announce(f"HAMi card order: go test ./pkg/scheduler -run {TEST} in {tree}"
                      " (compiles HAMi's scheduler tests: a few minutes the first time)")
    with log.open("w") as said:
        process = subprocess.Popen(["go", "test", "./pkg/scheduler", "-run", f"^{TEST}$", "-count=1"],
                                   cwd=tree, env={**os.environ, OUT_ENV: str(out)},
                                   stdout=said, stderr=subprocess.STDOUT)
        while True:
            try:
                code = process.wait(timeout=60)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() - started > timeout:
                    process.kill()
                    process.wait()
                    raise RuntimeError(f"go test of HAMi's card order ran over {timeout:.0f} s") from None
                upstream.announce(f"HAMi card order: still compiling ({time.monotonic() - started:.0f} s so far)")
    if code != 0:
        raise RuntimeError(f"go test of HAMi's card order failed ({code}):\n{log.read_text()[-4000:]}")
    if not out.exists():
        raise RuntimeError(f"go test wrote no cases (was {TEST} run?):\n{log.read_text()[-4000:]}")
    return [json.loads(line) for line in out.read_text().splitlines()]


def ours(case: Case) -> list[list[str]] | None:
    """The cards hami-dcu's fit_pod picks for the case's pod, per container, or None: no fit."""
    n = len(case["numa"])
    cards = [CardSpec(id=f"c{i}", index=case["index"][i], model="DCU-K100_AI", slots=SLOTS, memory=MEMORY,
                      cores=CORES, numa=case["numa"][i]) for i in range(n)]
    used = [Usage(k, SHARE_MEMORY * k, SHARE_CORES * k) for k in case["shares"]]
    annotations = {}
    if case["policy"]:
        annotations[keys.DEVICE_SCHEDULER_POLICY] = case["policy"]
    if case["numa_bind"]:
        annotations[keys.NUMA_BIND] = "true"
    # HAMi's defaults, as the probe sets them: binpack for nodes, spread for cards
    _, card_policy = policy.pod_policies(annotations, policy.DEFAULT_NODE_POLICY,
                                         policy.CardPolicy((policy.DEFAULT_CARD_POLICY,)))
    requests = [DcuRequest(count=k, memory_mib=SHARE_MEMORY, cores=SHARE_CORES) for k in case["counts"]]
    fit = fit_pod(cards, used, requests, [f"k{i}" for i in range(len(requests))], StartOrder(case["init"]),
                  Selection(keys.DCU_NAMING), card_policy)
    return [[d.uuid for d in container] for container in fit.devices] if isinstance(fit, PodFit) else None


def hamis(case: Case) -> list[list[str]] | None:
    """The cards HAMi picked, per container, or None: no fit."""
    return case["picked"] if case["ok"] else None


__all__ = ["PROBE", "TEST", "Case", "hami_cases", "hami_tree", "hamis", "ours"]
