"""Values that render but would break the cluster are refused at `helm template` / `install`
with one line saying what is wrong and what to set (issue 39): each was accepted before, and
the install looked fine until a pod, or the cluster's own scheduler, failed."""

import subprocess

import pytest
import yaml
from chart_paths import CHART

from e2e.tools import SET_IMAGE


def helm_template(helm, *values: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE, "--namespace", "kube-system",
                           "--kube-version", "1.34.0", *values], capture_output=True, text=True)


def refusal(helm, *values: str) -> str:
    """The one line of the refusal: what helm prints after `Error: ...: `."""
    done = helm_template(helm, *values)
    assert done.returncode != 0, f"accepted: {values}"
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    return line


@pytest.mark.parametrize(("values", "wrong", "remedy"), [
    (["scheduler.name=default-scheduler"], "scheduler.name is default-scheduler, the cluster's own scheduler",
     "choose another name, e.g. hami-scheduler"),
    (["scheduler.port=9395"], "scheduler.port and scheduler.metricsPort are both 9395",
     "give scheduler.port, webhook.port and scheduler.metricsPort a port each"),
    (["webhook.port=8443"], "scheduler.port and webhook.port are both 8443", "a port each"),
    (["scheduler.metricsPort=9443"], "webhook.port and scheduler.metricsPort are both 9443", "a port each"),
    (["scheduler.metricsPort=10259"], "scheduler.metricsPort and kube-scheduler's secure port are both 10259",
     "none of them 10259"),
    (["scheduler.kubeScheduler.tag=1.31.0"], 'scheduler.kubeScheduler.tag is "1.31.0"', "set v1.31.0"),
    (["scheduler.kubeScheduler.tag=latest"], "tagged with a leading v", "a version tag such as v1.31.0"),
    (["mode=dra", "volcano.enabled=true", "naming=hcu"], "volcano.enabled needs mode=devicePlugin",
     "set mode=devicePlugin, or volcano.enabled=false"),
    (["mode=dra", "volcano.enabled=true"], "volcano.enabled needs mode=devicePlugin", "set mode=devicePlugin"),
    (["scheduler.extenderResources.limits.memory=lots"],
     'scheduler.extenderResources.limits.memory is "lots", not a Kubernetes quantity', "512Mi or 1Gi"),
    (["devicePlugin.resources.requests.cpu=1 core"], 'devicePlugin.resources.requests.cpu is "1 core"', "500m or 2"),
    (["jobResources.limits.memroy=1Gi"], "jobResources.limits.memroy: memroy is not a resource Kubernetes knows",
     "use cpu, memory"),
    (["devicePlugin.driverDir=opt/dtk"], 'devicePlugin.driverDir is "opt/dtk"', "give an absolute path"),
    (["devicePlugin.hyhalDir=hyhal"], 'devicePlugin.hyhalDir is "hyhal"', "the default is /opt/hyhal"),
    (["devicePlugin.stateDir=state"], 'devicePlugin.stateDir is "state"', "give an absolute path"),
    (["draDriver.stateDir=/var/lib/../dra"], 'draDriver.stateDir is "/var/lib/../dra"', "without .."),
    (["draDriver.cdiDir=run/cdi"], 'draDriver.cdiDir is "run/cdi"', "the default is /var/run/cdi"),
    (["devicePlugin.mockDevices=null"], "devicePlugin.mockDevices is null", "or [] for none"),
    (["devicePlugin.smi=mock", "devicePlugin.mockDevices=null"], "devicePlugin.mockDevices is null",
     "--set-json 'devicePlugin.mockDevices=[]'"),
    (["httpLimits.maxConnectionsPerClient=97"],
     "httpLimits.maxConnectionsPerClient (97) must be at most httpLimits.maxConnections (96)",
     "lower httpLimits.maxConnectionsPerClient or raise httpLimits.maxConnections"),
    (["scheduler.devicePolicy={binpack,numa}"], "scheduler.devicePolicy is a list (binpack,numa), not a string",
     "--set 'scheduler.devicePolicy=binpack\\,numa'"),
])
def test_a_value_that_breaks_the_cluster_is_refused_in_one_line(helm, values, wrong, remedy):
    line = refusal(helm, *[arg for value in values for arg in ("--set", value)])
    assert wrong in line and remedy in line, line


def resource_blocks(node=None, path=""):
    """Every requests/limits block of values.yaml, by its dotted path."""
    node = yaml.safe_load((CHART / "values.yaml").read_text()) if node is None else node
    for key, value in node.items():
        if isinstance(value, dict):
            if {"requests", "limits"} & set(value):
                yield f"{path}{key}"
            else:
                yield from resource_blocks(value, f"{path}{key}.")


def test_every_resources_block_is_checked(helm):
    blocks = list(resource_blocks())
    assert len(blocks) >= 5, blocks
    for block in blocks:
        for section in ("requests", "limits"):
            line = refusal(helm, "--set", f"{block}.{section}.memory=lots")
            assert f'{block}.{section}.memory is "lots", not a Kubernetes quantity' in line, line


def test_quantities_kubernetes_parses_still_render(helm, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "scheduler": {"resources": {"requests": {"cpu": 0.5, "memory": 1073741824},
                                    "limits": {"cpu": 2, "memory": "1.5Gi", "ephemeral-storage": "1G"}}},
        "devicePlugin": {"resources": {"limits": {"cpu": "500m", "memory": "5e8", "hugepages-2Mi": "4Mi",
                                                  "example.com/thing": 1}}},
        "jobResources": {"requests": {"cpu": ".5", "memory": "128M"}},
    }))
    done = helm_template(helm, "-f", str(values))
    assert done.returncode == 0, done.stderr


def test_what_is_not_a_clash_still_renders(helm):
    """The device plugins and DRA drivers listen in pods of their own: their metrics port may be
    the scheduler pod's port. Without the scheduler nothing of its pod is checked."""
    for values in (["devicePlugin.metricsPort=8443"], ["devicePlugin.metricsPort=9395"],
                   ["mode=dra", "draDriver.metricsPort=8443"],
                   ["webhook.enabled=false", "webhook.port=9395"],
                   ["scheduler.kubeScheduler.enabled=false", "scheduler.metricsPort=10259"],
                   ["scheduler.kubeScheduler.tag=v1.31.0"],
                   ["scheduler.enabled=false", "scheduler.port=9395", "scheduler.name=default-scheduler"],
                   ["httpLimits.maxConnectionsPerClient=96"]):
        done = helm_template(helm, *[arg for value in values for arg in ("--set", value)])
        assert done.returncode == 0, (values, done.stderr)
    done = helm_template(helm, "--set", "devicePlugin.smi=mock", "--set-json", "devicePlugin.mockDevices=[]")
    assert done.returncode == 0, done.stderr
    assert "default.yaml: |\n    []" in done.stdout


def test_a_policy_chain_renders_escaped_or_as_json_and_the_escape_is_documented(helm):
    for flag, value in (("--set", "scheduler.devicePolicy=binpack\\,numa"),
                        ("--set-string", "scheduler.devicePolicy=binpack\\,numa"),
                        ("--set-json", 'scheduler.devicePolicy="binpack,numa"')):
        done = helm_template(helm, flag, value)
        assert done.returncode == 0 and "--device-policy=binpack,numa" in done.stdout, done.stderr
    # Helm refuses the unescaped comma itself, before the chart is read: the docs say the escape.
    assert 'key "numa" has no value' in helm_template(helm, "--set", "scheduler.devicePolicy=binpack,numa").stderr
    for doc in (CHART / "values.yaml", CHART / "README.md"):
        text = doc.read_text()
        assert "--set 'scheduler.devicePolicy=binpack\\,numa'" in text, doc
        assert "--set-json 'scheduler.devicePolicy=\"binpack,numa\"'" in text, doc
        assert 'key "numa" has no value' in text, doc


# No hami-dcu image is published (issue 39): every configuration runs ours (the scheduler pod,
# the device plugin or the DRA driver, the certificate jobs), so each refuses without one.
@pytest.mark.parametrize("values", [[], ["--set", "image.repository="], ["--set", "mode=dra"],
                                    ["--set", "scheduler.enabled=false"]])
@pytest.mark.parametrize("verb", [["template", "x", "--kube-version", "1.34.0"],
                                  ["install", "hami-dcu", "--dry-run=client"]])
def test_without_an_image_repository_the_refusal_says_how_to_build_one(helm, verb, values):
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    done = subprocess.run([str(helm), *verb, str(CHART), "--namespace", "kube-system", *values],
                          capture_output=True, text=True)
    assert done.returncode != 0, f"accepted: {values}"
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert line.endswith(
        "image.repository is required: no hami-dcu image is published; build one from this chart's source and push it"
        f" where your nodes pull from: docker build -t <registry>/hami-dcu:{app_version} . && docker push"
        f" <registry>/hami-dcu:{app_version}, then --set image.repository=<registry>/hami-dcu"), line


def test_an_image_repository_renders_every_hami_dcu_container_from_it(helm):
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    done = subprocess.run([str(helm), "template", "x", str(CHART), "--kube-version", "1.34.0",
                           "--set", "image.repository=harbor.example.com/dcu/hami-dcu"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found = {line.split("image: ", 1)[1].strip('"') for line in done.stdout.splitlines() if "image: " in line}
    assert found == {f"harbor.example.com/dcu/hami-dcu:{app_version}", "registry.k8s.io/kube-scheduler:v1.34.0"}
