"""Every PromQL expression the docs give (README.md's and docs/operations.md's `promql` blocks,
the Grafana dashboard's panels, chart/dashboards/hami-dcu.json) asked of a real Prometheus that
scraped the chart's metrics endpoints on kind, after scenarios that produce series.

Prometheus is built from the Go module proxy by e2e/upstream/build-prometheus.sh (cached per
user; .ci/run builds it beside the fast suite) and runs on the host. It reaches the extender's
`/metrics` (`scheduler.metricsPort`) and each device plugin's (`devicePlugin.metricsPort`, set by
the suite) through `kubectl port-forward`, with `honor_labels: true` as the chart's
ServiceMonitor and PodMonitor keep the components' own labels. The scenario: a share and a whole
card running (examples/share.yaml, whole-card.yaml), a pod over the namespace quota refused
(namespace-quota.yaml), a pod no card fits (card-type.yaml's Z100-only pod, failing /filter).

An expression fails the test when Prometheus answers an error, or answers nothing while it is
in neither QUIET (alert conditions, empty on a healthy cluster) nor NOT_PRODUCED (series of
events the scenario does not cause, or of DRA mode), each with its reason.

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
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import test_kind_examples as examples
from e2e.kindcluster import METRICS_PORT, RELEASE_NAMESPACE, WORKERS, KindBackend
from e2e.scenarios import wait_until

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
# Series of events this scenario does not cause: empty here, evaluated without error. Each is a
# gap a later scenario can close (a preemption, a stale lock, a cache drift, DRA mode).
NOT_PRODUCED: dict[str, str] = {
    "sum by (kind) (rate(hami_dcu_cache_drift_total[1h]))": "no cache drift happens",
    "histogram_quantile(0.5, sum by (le) (rate(hami_dcu_scheduler_preempt_seconds_bucket[5m])))": "no preemption",
    "histogram_quantile(0.99, sum by (le) (rate(hami_dcu_scheduler_preempt_seconds_bucket[5m])))": "no preemption",
    "max(hami_dcu_node_lock_held_seconds)": "no node lock is held when Prometheus is asked",
    "sum by (reason) (rate(hami_dcu_scheduler_node_lock_takeovers_total[5m]))": "no stale lock is taken over",
    "sum by (reason) (rate(hami_dcu_scheduler_node_lock_releases_total[5m]))": "no lock is released by a cause",
    "sum by (reason) (rate(hami_dcu_plugin_node_lock_releases_total[5m]))": "no lock is released by a cause",
    "sum(rate(hami_dcu_plugin_device_id_mismatches_total[5m]))": "the kubelet passes the scheduler's cards",
    "sum by (result) (rate(hami_dcu_dra_prepares_total[5m]))": "DRA mode only; the check runs in device-plugin mode",
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
    assert set(QUIET) | set(NOT_PRODUCED) <= set(exprs), sorted((set(QUIET) | set(NOT_PRODUCED)) - set(exprs))


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


@pytest.fixture
def prometheus(kind: KindBackend, tmp_path: Path) -> Iterator[str]:
    binary = prometheus_binary()
    kind.ensure_mode("devicePlugin")
    kind.clean()
    children: list[subprocess.Popen[str]] = []
    try:
        scheduler = port_forward(kind, scheduler_pod(kind), SCHEDULER_METRICS_PORT, children)
        plugins = [port_forward(kind, str(kind.plugin_pod(node)), METRICS_PORT, children) for node in WORKERS]
        targets = {"hami-dcu-scheduler": [f"127.0.0.1:{scheduler}"],
                   "hami-dcu-device-plugin": [f"127.0.0.1:{port}" for port in plugins]}
        config = {"global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
                  "scrape_configs": [{"job_name": job, "honor_labels": True, "static_configs": [{"targets": t}]}
                                     for job, t in targets.items()]}
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        log = (tmp_path / "prometheus.log").open("w")
        children.append(subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                                          f"--storage.tsdb.path={tmp_path / 'data'}",
                                          f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log, text=True))
        api = f"http://127.0.0.1:{port}"

        def all_up() -> bool:
            try:
                answer = query(api, "up")
            except OSError:
                return False
            values = [r["value"][1] for r in answer.get("data", {}).get("result", [])]
            return len(values) == 1 + len(WORKERS) and all(v == "1" for v in values)

        wait_until("Prometheus scraping the extender and every device plugin", all_up, timeout=90, interval=1)
        yield api
    finally:
        for child in reversed(children):
            child.terminate()
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
        kind.clean()


@pytest.mark.kind
def test_every_documented_expression_answers_with_data(kind: KindBackend, prometheus: str) -> None:
    quota_docs = [examples.for_kind(kind, d) for d in examples.load("namespace-quota.yaml")]
    z100 = examples.for_kind(kind, examples.load("card-type.yaml")[0])
    z100["metadata"] = {"name": "dcu-no-such-model", "annotations": {"hygon.com/use-dcutype": "Z100"}}
    try:
        examples.namespace_quota(kind, quota_docs)
        examples.delete(kind, quota_docs)  # the quota is too small for what follows
        for name, check in (("share.yaml", examples.share), ("whole-card.yaml", examples.whole_card)):
            check(kind, [examples.for_kind(kind, d) for d in examples.load(name)])
        examples.apply(kind, z100)
        time.sleep(10 * SCRAPE_SECONDS)  # rates over [5m] need two scrapes after the scenario
        exprs = documented()
        failures, quiet = [], []
        for expr in exprs:
            asked = in_dcu_naming(expr)  # the cluster speaks dcu: an hcu series is asked by its dcu name
            answer = query(prometheus, asked)
            if answer.get("status") != "success":
                failures.append(f"{asked}: {answer.get('errorType')}: {answer.get('error')}")
            elif not answer["data"]["result"]:
                if expr in QUIET or expr in NOT_PRODUCED:
                    quiet.append(expr)
                else:
                    failures.append(f"{asked}: no data")
        print(f"{len(exprs)} expressions asked of Prometheus: {len(exprs) - len(failures) - len(quiet)} with data, "
              f"{len(quiet)} empty as expected (QUIET, NOT_PRODUCED), {len(failures)} failed")
        assert not failures, "\n".join(failures)
    finally:
        examples.delete(kind, [*quota_docs, z100])
