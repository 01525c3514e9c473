"""nameOverride, fullnameOverride, podLabels and podAnnotations: the usual chart knobs."""

import subprocess

import pytest
from chart_paths import CHART

from e2e.tools import SET_IMAGE

WORKLOADS = ("Deployment", "DaemonSet", "Job", "CronJob")
FIXED_NAMES = {"extension-apiserver-authentication-reader", "system:kube-scheduler", "system:volume-scheduler"}


def pod_templates(docs):
    for doc in docs:
        if doc["kind"] == "CronJob":
            yield doc, doc["spec"]["jobTemplate"]["spec"]["template"]
        elif doc["kind"] in WORKLOADS:
            yield doc, doc["spec"]["template"]


def own_names(docs):
    return {d["metadata"]["name"] for d in docs} - FIXED_NAMES


def test_full_name_override_names_every_object(render):
    docs = render("--set", "fullnameOverride=dcu")
    assert all(name.startswith("dcu-") or name == "dcu" for name in own_names(docs)), own_names(docs)
    (post,) = [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "dcu-certs-post"]
    args = post["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--secret=dcu-webhook-tls" in args and "--webhook-config=dcu-webhook" in args


def test_name_override_renames_and_relabels_consistently(render):
    docs = render("--set", "nameOverride=vdcu")  # the release, hami-dcu, does not contain it
    assert all(name.startswith("hami-dcu-vdcu") for name in own_names(docs)), own_names(docs)
    for workload, template in pod_templates(docs):
        assert template["metadata"]["labels"]["app.kubernetes.io/name"] == "vdcu"
        selector = (workload["spec"].get("selector") or {}).get("matchLabels") or {}
        assert selector.items() <= template["metadata"]["labels"].items()


@pytest.mark.parametrize("mode", ["devicePlugin", "dra"])
def test_pod_labels_and_annotations_reach_every_pod(render, mode):
    docs = render("--set", f"mode={mode}", "--set", "podLabels.team=ml",
                  "--set-string", "podAnnotations.cost-center=42", kube_version="1.34.0")  # DRA needs 1.34
    templates = list(pod_templates(docs))
    assert {w["kind"] for w, _ in templates} == set(WORKLOADS)
    for workload, template in templates:
        assert template["metadata"]["labels"]["team"] == "ml", workload["metadata"]["name"]
        assert template["metadata"]["annotations"]["cost-center"] == "42", workload["metadata"]["name"]
        assert template["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    assert all("team" not in (w["metadata"].get("labels") or {}) for w, _ in templates)  # pods only


def test_pod_labels_cannot_replace_the_charts_own(helm):
    done = subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE, "--set",
                           "podLabels.app\\.kubernetes\\.io/name=other"], capture_output=True, text=True)
    assert done.returncode != 0 and "podLabels.app.kubernetes.io/name: the chart sets this label itself" in done.stderr
