"""Every PromQL expression the docs give (README.md's and docs/operations.md's `promql` blocks,
the Grafana dashboard's panels, chart/dashboards/hami-dcu.json) asked of a real Prometheus that
scraped the chart's metrics endpoints on kind, after scenarios that produce series.

Prometheus is built from the Go module proxy by e2e/upstream/build-prometheus.sh (cached per
user; .ci/run builds it beside the fast suite) and runs on the host. It reaches the extender's
`/metrics` (`scheduler.metricsPort`) and each device plugin's or DRA driver's
(`devicePlugin.metricsPort`, `draDriver.metricsPort`, set by the suite) through `kubectl
port-forward`, with `honor_labels: true` as the chart's ServiceMonitor and PodMonitor keep the
components' own labels.

Device-plugin mode first. The events behind the series a healthy run never shows are caused for
real (e2e/kind_metric_events.py says how): a preemption through the extender's /preempt, an app
container handed its init container's device id by the kubelet, node locks taken over and
released by the extender and by a device plugin, a cache drift the extender's relist repairs, and
a node lock held while Prometheus is asked. Then the examples' scenario: a share and a whole card
running (examples/share.yaml, whole-card.yaml), a pod over the namespace quota refused
(namespace-quota.yaml), a pod no card fits (card-type.yaml's Z100-only pod, failing /filter).
Then DRA mode, for the DRA driver's own series (DRA_MODE): a claim prepared by the real kubelet.

An expression fails the test when Prometheus answers an error, or answers nothing while it is not
in QUIET (alert conditions, empty on a healthy cluster, each with its reason).

    pytest -m kind e2e/test_kind_promql.py
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import kind_metric_events as events
from e2e import test_kind_dra as dra
from e2e import test_kind_examples as examples
from e2e.kindcluster import METRICS_PORT, RELEASE_NAMESPACE, WORKERS, KindBackend
from e2e.scenarios import phase, wait_until
from hami_dcu.common.io.kube import NotFoundError

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "e2e" / "upstream" / "build-prometheus.sh"
DOCS = [ROOT / "README.md", ROOT / "docs/operations.md"]
DASHBOARD = ROOT / "chart" / "dashboards" / "hami-dcu.json"
SCHEDULER_METRICS_PORT = 9395  # the chart's scheduler.metricsPort default
SCRAPE_SECONDS = 2
FENCE = re.compile(r"^```promql\n(.*?)^```\n", re.S | re.M)
JSON = dict[str, Any]

# Empty after the scenario on a healthy cluster, and why. Everything else must return data.
QUIET: dict[str, str] = {
    "hami_dcu_node_lock_held_seconds > 60": "an alert: no node lock is held a minute",
    "hami_dcu_card_healthy == 0": "an alert: the mock cards are healthy",
    "hami_dcu_certificate_expiry_timestamp_seconds - time() < 14 * 86400": "an alert: the certificate is new",
    "sum by (component) (increase(hami_dcu_internal_errors_total[1h])) > 0": "an alert: no bug was hit",
    "hami_dcu_usage_source_up == 0": "an alert: every usage source answers",
    "max_over_time(vhcu_utilizationrate{hcu_pod_name!=\"\"}[1h]) == 0":
        "an alert: the mock SMI's vDCUs are never idle",
}
# The DRA driver's series: asked in DRA mode (the second test), where the driver serves them.
DRA_MODE: dict[str, str] = {
    "sum by (result) (rate(hami_dcu_dra_prepares_total[5m]))": "NodePrepareResources calls, by result",
}


def documented() -> list[str]:
    """The expressions of the docs' promql blocks (a line that starts with a space continues the
    one above) and of the dashboard's panels, each once, in the order they appear."""
    found: list[str] = []
    for doc in DOCS:
        for block in FENCE.findall(doc.read_text()):
            for line in block.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                if line[0].isspace() and found:
                    found[-1] += " " + line.strip()
                else:
                    found.append(line.strip())
    panels: list[JSON] = list(json.loads(DASHBOARD.read_text())["panels"])
    while panels:
        panel = panels.pop(0)
        panels.extend(panel.get("panels") or [])
        found.extend(t["expr"] for t in panel.get("targets") or [] if t.get("expr"))
    return list(dict.fromkeys(found))


def in_dcu_naming(expr: str) -> str:
    """An expression of the hcu set's usage series as the dcu set (the kind suite's) names them:
    the same series with `vdcu_`/`dcu_` (docs/operations.md, Per-pod usage)."""
    return re.sub(r"\b(v?)hcu_", r"\1dcu_", expr)


def test_the_docs_give_expressions_to_check() -> None:
    """Not marked kind: the parser finds the documented expressions, and QUIET names only those."""
    exprs = documented()
    assert len(exprs) > 40, exprs
    assert "1 - sum(rate(hami_dcu_scheduler_node_lock_wait_seconds_bucket{le=\"1.0\"}[5m])) " \
           "/ sum(rate(hami_dcu_scheduler_node_lock_wait_seconds_count[5m]))" in exprs
    assert set(QUIET) | set(DRA_MODE) <= set(exprs), sorted((set(QUIET) | set(DRA_MODE)) - set(exprs))
    assert all("hami_dcu_dra_" in expr for expr in DRA_MODE), DRA_MODE


# --- Prometheus beside the kind cluster --------------------------------------------------------


def prometheus_binary() -> str:
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=3600)
    if done.returncode == 3:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, f"{BUILD} failed:\n{done.stderr[-3000:]}"
    return done.stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_forward(b: KindBackend, pod: str, port: int, children: list[subprocess.Popen[str]]) -> int:
    local = free_port()
    child = subprocess.Popen([str(b.world.kubectl), "--kubeconfig", str(b.kubeconfig), "-n", RELEASE_NAMESPACE,
                              "port-forward", f"pod/{pod}", f"{local}:{port}"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    children.append(child)
    assert child.stdout is not None
    line = child.stdout.readline()
    assert "Forwarding from" in line, f"port-forward to {pod}:{port}: {line}"
    return local


def scheduler_pod(b: KindBackend) -> str:
    for pod in b.kube.list_pods(namespace=RELEASE_NAMESPACE).items:
        labels = pod["metadata"].get("labels") or {}
        if labels.get("app.kubernetes.io/component") == "scheduler" and not pod["metadata"].get("deletionTimestamp"):
            return str(pod["metadata"]["name"])
    raise AssertionError(f"no hami-dcu scheduler pod in {RELEASE_NAMESPACE}")


def query(api: str, expr: str) -> JSON:
    url = f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return dict(json.loads(answer.read()))
    except urllib.error.HTTPError as err:
        return dict(json.loads(err.read()))


@dataclass(frozen=True)
class Scraped:
    api: str  # Prometheus' HTTP API
    at: events.Endpoints  # the components' /metrics, for the scenario's own checks


@contextmanager
def prometheus_over(b: KindBackend, workdir: Path) -> Iterator[Scraped]:
    """Prometheus scraping the extender and every worker's plugin (or DRA driver) of the chart
    installed now, until the block ends."""
    binary = prometheus_binary()
    children: list[subprocess.Popen[str]] = []
    try:
        scheduler = port_forward(b, scheduler_pod(b), SCHEDULER_METRICS_PORT, children)
        nodes = {node: port_forward(b, str(b.plugin_pod(node)), METRICS_PORT, children) for node in WORKERS}
        targets = {"hami-dcu-scheduler": [f"127.0.0.1:{scheduler}"],
                   "hami-dcu-node": [f"127.0.0.1:{port}" for port in nodes.values()]}
        config = {"global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
                  "scrape_configs": [{"job_name": job, "honor_labels": True, "static_configs": [{"targets": t}]}
                                     for job, t in targets.items()]}
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        log = (workdir / "prometheus.log").open("w")
        children.append(subprocess.Popen([binary, f"--config.file={workdir / 'prometheus.yml'}",
                                          f"--storage.tsdb.path={workdir / 'data'}",
                                          f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log, text=True))
        api = f"http://127.0.0.1:{port}"

        def all_up() -> bool:
            try:
                answer = query(api, "up")
            except OSError:
                return False
            values = [r["value"][1] for r in answer.get("data", {}).get("result", [])]
            return len(values) == 1 + len(WORKERS) and all(v == "1" for v in values)

        wait_until("Prometheus scraping the extender and every worker", all_up, timeout=90, interval=1)
        yield Scraped(api, events.Endpoints(scheduler, nodes))
    finally:
        for child in reversed(children):
            child.terminate()
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()


@pytest.fixture
def prometheus(kind: KindBackend, tmp_path: Path) -> Iterator[Scraped]:
    kind.ensure_mode("devicePlugin")
    kind.clean()
    try:
        with prometheus_over(kind, tmp_path) as scraped:
            yield scraped
    finally:
        kind.clean()
        events.no_lock_left(kind, events.scheduler_identity(kind))
        events.remove_priority_classes(kind)


@pytest.fixture
def prometheus_dra(kind: KindBackend, tmp_path: Path) -> Iterator[Scraped]:
    kind.ensure_mode("dra")
    kind.clean_claims()
    try:
        with prometheus_over(kind, tmp_path) as scraped:
            yield scraped
    finally:
        kind.clean_claims()


def ask(api: str, exprs: list[str]) -> tuple[int, list[str]]:
    """How many expressions Prometheus answered with data, and the failures: an error, or no
    data for an expression not in QUIET."""
    answered, failures = 0, []
    for expr in exprs:
        asked = in_dcu_naming(expr)  # the cluster speaks dcu: an hcu series is asked by its dcu name
        answer = query(api, asked)
        if answer.get("status") != "success":
            failures.append(f"{asked}: {answer.get('errorType')}: {answer.get('error')}")
        elif answer["data"]["result"]:
            answered += 1
        elif expr not in QUIET:
            failures.append(f"{asked}: no data")
    return answered, failures


def causes_the_rare_events(b: KindBackend, at: events.Endpoints, identity: str) -> None:
    """What e2e/kind_metric_events.py describes, in an order where each step finds the workers
    as it needs them; its pods are gone afterwards (the examples' scenario needs the namespace
    empty, for the quota's sake), but for the Pending pod the last lock will name."""
    events.pending_pod(b, "promql-holder")
    events.pending_pod(b, "promql-held")
    events.preemption_and_a_reused_device_id(b, at)
    attempt = events.lock_taken_over(b, at, identity, "promql-holder")
    print(f"a bind took the lock over at attempt {attempt + 1}")
    events.lock_released_by_the_plugin(b, at, identity)
    events.lock_released_by_the_extender(b, at, identity, "promql-holder")
    events.cache_drift(b, at, "promql-high")
    leftovers = [p["metadata"]["name"] for p in b.kube.list_pods(namespace=b.namespace).items
                 if p["metadata"]["name"] != "promql-held"]
    for name in leftovers:
        try:
            b.kube.delete_pod(b.namespace, name)
        except NotFoundError:
            pass  # the preempted pod, gone between the list and now
    events.wait_gone(b, *leftovers)


@pytest.mark.kind
def test_every_documented_expression_answers_with_data(kind: KindBackend, prometheus: Scraped) -> None:
    started = time.monotonic()
    identity = events.scheduler_identity(kind)
    quota_docs = [examples.for_kind(kind, d) for d in examples.load("namespace-quota.yaml")]
    z100 = examples.for_kind(kind, examples.load("card-type.yaml")[0])
    z100["metadata"] = {"name": "dcu-no-such-model", "annotations": {"hygon.com/use-dcutype": "Z100"}}
    try:
        causes_the_rare_events(kind, prometheus.at, identity)
        print(f"rare events caused in {time.monotonic() - started:.0f} s")
        examples.namespace_quota(kind, quota_docs)
        examples.delete(kind, quota_docs)  # the quota is too small for what follows
        for name, check in (("share.yaml", examples.share), ("whole-card.yaml", examples.whole_card)):
            check(kind, [examples.for_kind(kind, d) for d in examples.load(name)])
        examples.apply(kind, z100)
        time.sleep(10 * SCRAPE_SECONDS)  # rates over [5m] need two scrapes after the scenario
        # Last, as it keeps a worker locked: asked within the bind window, in which the lock's
        # Pending holder still needs it as far as anyone can tell.
        node = events.hold_a_lock(kind, identity, "promql-held")
        wait_until("Prometheus seeing the lock held", lambda: query(
            prometheus.api, f'hami_dcu_node_lock_held_seconds{{node="{node}"}}')["data"]["result"], timeout=20,
            interval=0.5)
        exprs = [expr for expr in documented() if expr not in DRA_MODE]
        answered, failures = ask(prometheus.api, exprs)
        assert events.lock_of(kind, node) is not None, "the held lock went while Prometheus was asked"
        print(f"{len(exprs)} expressions asked of Prometheus in device-plugin mode: {answered} with data, "
              f"{len(exprs) - answered - len(failures)} empty alerts (QUIET), {len(failures)} failed; "
              f"{len(DRA_MODE)} left to DRA mode; {time.monotonic() - started:.0f} s")
        assert not failures, "\n".join(failures)
    finally:
        examples.delete(kind, [*quota_docs, z100])
        if phase(kind.kube, kind.namespace, "promql-held") != "Gone":
            kind.kube.delete_pod(kind.namespace, "promql-held")  # the extender releases its lock


@pytest.mark.kind
def test_the_dra_drivers_expressions_answer_in_dra_mode(kind: KindBackend, prometheus_dra: Scraped) -> None:
    dra.share(kind, "promql-claim", cores="20", memory="4Gi")
    pod = dra.running(kind, "promql-claim")
    node = pod["spec"]["nodeName"]
    assert events.metric(prometheus_dra.at.nodes[node], "hami_dcu_dra_prepares_total", result="success") >= 1
    time.sleep(3 * SCRAPE_SECONDS)  # a rate needs two scrapes of the counter
    answered, failures = ask(prometheus_dra.api, list(DRA_MODE))
    print(f"{len(DRA_MODE)} expressions of the DRA driver asked in DRA mode: {answered} with data")
    assert not failures, "\n".join(failures)
