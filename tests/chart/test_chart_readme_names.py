"""The objects the READMEs tell an operator to look at (troubleshooting, certificates, uninstall,
beside HAMi) are the ones the chart creates for release hami-dcu in kube-system, under those
names; the Lease and the DTK mount are as the READMEs say."""

import re

import pytest
from chart_paths import ROOT

# (kind, name) as the READMEs write them, each in the English and the Chinese README.
OBJECTS = [
    ("MutatingWebhookConfiguration", "hami-dcu-webhook", "MutatingWebhookConfiguration hami-dcu-webhook"),
    ("CronJob", "hami-dcu-certs-renewal", "--from=cronjob/hami-dcu-certs-renewal"),
    ("Deployment", "hami-dcu-scheduler", "deploy/hami-dcu-scheduler -c extender"),
]
SECRETS = ["hami-dcu-webhook-tls", "hami-dcu-webhook-ca"]
READMES = [ROOT / "README.md", ROOT / "README.zh-CN.md"]


@pytest.fixture(scope="module")
def docs(render):
    return render()


@pytest.mark.parametrize(("kind", "name", "words"), OBJECTS, ids=[o[1] for o in OBJECTS])
def test_the_named_objects_exist(docs, kind, name, words):
    assert any(d["kind"] == kind and d["metadata"]["name"] == name for d in docs), (kind, name)
    for readme in READMES:
        assert words in readme.read_text(), (readme.name, words)


def test_the_extender_container_is_called_extender(docs):
    (deploy,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "hami-dcu-scheduler"]
    assert "extender" in [c["name"] for c in deploy["spec"]["template"]["spec"]["containers"]]


def test_the_certificate_secrets_are_the_ones_the_jobs_write(docs):
    jobs = [str(d) for d in docs if d["kind"] in ("Job", "CronJob")]
    args = [a for job in jobs for a in re.findall(r"--(?:ca-)?secret=([\w.-]+)", job)]
    assert set(args) == set(SECRETS)
    for readme in READMES:
        assert all(f"`{s}`" in readme.read_text() for s in SECRETS), readme.name


def test_the_dtk_is_mounted_as_a_directory_that_must_exist(render):
    """Troubleshooting's missing-DTK row: the hostPath is `type: Directory`, so a node without
    it leaves the plugin's (or driver's) pod in FailedMount."""
    for values in ([], ["--set", "mode=dra"]):
        pods = [d for d in render(*values, kube_version="1.34.0") if d["kind"] == "DaemonSet"]
        volumes = [v for d in pods for v in d["spec"]["template"]["spec"]["volumes"] if v["name"] == "dtk"]
        assert volumes and all(v["hostPath"] == {"path": "/opt/dtk", "type": "Directory"} for v in volumes)
    for readme in READMES:
        assert "hostPath type check failed: /opt/dtk is not a directory" in readme.read_text()


def test_the_lease_is_named_as_the_readme_says(docs):
    """Beside HAMi: the Lease is `<release>-hami-dcu-kube-scheduler`, `hami-dcu-kube-scheduler` for
    release hami-dcu."""
    config = "\n".join(str(d.get("data", "")) for d in docs if d["kind"] == "ConfigMap")
    assert "resourceName: hami-dcu-kube-scheduler" in config
    for readme in READMES:
        assert "`hami-dcu-kube-scheduler`" in readme.read_text()
