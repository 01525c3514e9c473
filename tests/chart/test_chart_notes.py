"""NOTES.txt tells the truth for any nodeSelector and slot count, and in every mode: what it says
is checked against what the same install creates."""

import subprocess

import yaml
from chart_paths import CHART

from e2e.tools import SET_IMAGE


def notes(helm, *values: str) -> str:
    done = subprocess.run([str(helm), "install", "hami-dcu", str(CHART), *SET_IMAGE, "-n", "kube-system",
                           "--dry-run=client", *values], capture_output=True, text=True, check=True)
    return done.stdout.split("NOTES:\n", 1)[1]


def test_label_command_names_every_selector_label(helm):
    text = notes(helm, "--set", "devicePlugin.nodeSelector.gpu=hygon", "--set", "devicePlugin.slotsPerCard=8")
    assert "kubectl label node <node> dcu=on gpu=hygon\n" in text
    assert "(8 vDCU slots per card)" in text


def test_no_selector_means_no_label_to_set(helm):
    text = notes(helm, "--set", "devicePlugin.nodeSelector=null")
    assert "kubectl label node" not in text and "runs on every node" in text
    assert "(4 vDCU slots per card)" in text and "hami-dcu status" in text


def test_the_notes_follow_the_mode_and_the_naming_set(helm):
    dra = notes(helm, "--set", "mode=dra")  # helm install --dry-run=client assumes a 1.3x past 1.34
    assert "in DRA mode (mode=dra)" in dra and "kubectl get resourceslices --field-selector spec.driver=dra.hygon.com" \
        in dra
    assert "the DRA driver runs only there" in dra and "kubectl get resourceclaims" in dra
    assert "node-dcu-register" not in dra and "routes such pods to schedulerName" not in dra
    hcu = notes(helm, "--set", "naming=hcu")
    assert "in device-plugin mode (mode=devicePlugin)" in hcu
    assert "hami\\.io/node-hcu-register" in hcu and "hygon\\.com/hcunum" in hcu and "hygon.com/hcumem: 2000" in hcu
    assert "dcu-register" not in hcu and "resourceslices" not in hcu


def test_dra_mode_is_refused_below_kubernetes_1_34_with_what_to_do(helm):
    old = subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE, "--set", "mode=dra",
                          "--kube-version", "1.33.4"], capture_output=True, text=True)
    assert old.returncode != 0
    assert "mode=dra needs Kubernetes 1.34 or later" in old.stderr and "this cluster is v1.33.4" in old.stderr
    assert "use mode=devicePlugin" in old.stderr
    for version in ("1.34.0", "1.36.1"):
        subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE, "--set", "mode=dra",
                        "--kube-version", version], capture_output=True, text=True, check=True)
    subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE, "--kube-version", "1.30.0"],
                   capture_output=True, text=True, check=True)  # device-plugin mode: any supported version


def test_the_documented_policy_chain_renders(render):
    """README's example: a comma inside a --set value is escaped, or the value is given with -f."""
    for flag in ("--set", "--set-string"):
        docs = render(flag, "scheduler.devicePolicy=binpack\\,numa")
        (scheduler,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("scheduler")]
        args = [a for c in scheduler["spec"]["template"]["spec"]["containers"] for a in c.get("args") or []]
        assert "--device-policy=binpack,numa" in args
    readme = (CHART.parent / "README.md").read_text() + (CHART / "README.md").read_text()
    assert "--set 'scheduler.devicePolicy=binpack\\,numa'" in readme


def installed(helm, *values: str) -> tuple[list[dict], str]:
    """What `helm install` would create (hooks included) and the NOTES it prints."""
    done = subprocess.run([str(helm), "install", "hami-dcu", str(CHART), *SET_IMAGE, "-n", "kube-system",
                           "--dry-run=client", *values], capture_output=True, text=True, check=True)
    objects, notes_text = done.stdout.split("NOTES:\n", 1)
    objects = objects.split("HOOKS:\n", 1)[-1].replace("MANIFEST:\n", "---\n")
    return [d for d in yaml.safe_load_all(objects) if d], notes_text


def args_of(docs, kind: str, suffix: str, container: str) -> list[str]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    if not found:
        return []
    (c,) = [c for c in found[0]["spec"]["template"]["spec"]["containers"] if c["name"] == container]
    return c.get("command", []) + c.get("args", [])


def scheduler_config(docs) -> dict:
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("scheduler-config")]
    return yaml.safe_load(config["data"]["config.yaml"])


def check_every_mode(notes_text: str) -> None:
    # hami-dcu is not on PyPI: the CLI is installed from the checkout or a wheel built there.
    assert "pip install hami-dcu" not in notes_text and "not on PyPI" in notes_text
    assert "`pip install ./` at its root" in notes_text and "pip wheel . -w wheels" in notes_text
    assert "pip install --no-index --find-links wheels hami-dcu" in notes_text
    # Issue 35, item 9: plain pods mounting the devices by hostPath are Pod Security's to refuse.
    assert "Pod Security baseline or restricted" in notes_text
    assert "kubectl label namespace <namespace> pod-security.kubernetes.io/enforce=baseline" in notes_text


def test_device_plugin_notes_say_what_is_installed(helm):
    docs, text = installed(helm, "--set", "scheduler.name=hami-dcu-scheduler")
    check_every_mode(text)
    (profile,) = scheduler_config(docs)["profiles"]
    (extender,) = scheduler_config(docs)["extenders"]
    assert extender["filterVerb"] == "filter" and extender["bindVerb"] == "bind"
    assert f"routes such pods to schedulerName {profile['schedulerName']}, a profile of the kube-scheduler this" \
           "\n   chart runs, which asks hami-dcu's extender to filter the nodes and bind" in text
    assert args_of(docs, "DaemonSet", "device-plugin", "device-plugin")
    assert "Volcano" not in text and "helm test hami-dcu -n kube-system" in text
    assert any(d["kind"] == "Pod" and d["metadata"]["annotations"]["helm.sh/hook"] == "test" for d in docs)


def test_dra_notes_say_what_is_installed(helm):
    docs, text = installed(helm, "--set", "mode=dra", "--set", "scheduler.name=hami-dcu-scheduler")
    check_every_mode(text)
    (device_class,) = [d["metadata"]["name"] for d in docs if d["kind"] == "DeviceClass"]
    assert f"kubectl get deviceclass {device_class}\n" in text and f"DeviceClass {device_class} with" in text
    assert args_of(docs, "DaemonSet", "dra-driver", "dra-driver") and "the DRA driver runs only there" in text
    # The chart's profile routes the pods and its extender ranks the nodes: it takes part.
    (profile,) = scheduler_config(docs)["profiles"]
    (extender,) = scheduler_config(docs)["extenders"]
    assert extender["prioritizeVerb"] == "prioritize" and "filterVerb" not in extender and "bindVerb" not in extender
    assert "takes no part" not in text
    name = profile["schedulerName"]
    assert f"The webhook gives such pods schedulerName {name}, a profile of the kube-scheduler" in text
    assert "allocates the claims itself" in text and "only to rank the nodes that fit (/prioritize" in text
    assert "Volcano" not in text


def test_volcano_notes_say_what_is_installed_and_what_is_expected(helm):
    docs, text = installed(helm, "--set", "naming=hcu", "--set", "volcano.enabled=true",
                           "--set", "volcano.schedulerName=vc-hygon",
                           "--set", "devicePlugin.registerIntervalSeconds=20",
                           "--set", "volcano.identity=system:serviceaccount:vc:vc-scheduler")
    check_every_mode(text)
    plugin = args_of(docs, "DaemonSet", "device-plugin", "device-plugin")
    extender = args_of(docs, "Deployment", "scheduler", "extender")
    assert "--volcano-scheduler-name=vc-hygon" in plugin and "--register-interval=20" in plugin
    assert "--volcano-identity=system:serviceaccount:vc:vc-scheduler" in extender
    assert "Volcano mode (volcano.enabled, pods with schedulerName vc-hygon)" in text
    assert "pods with schedulerName vc-hygon are left to Volcano, which this chart does not\n   install" in text
    assert "HYGON-AI/volcano) with deviceshare.VHCUEnable: true" in text
    assert "its scheduler running as system:serviceaccount:vc:vc-scheduler\n" in text
    assert "hami.io/node-hcu-register with a handshake every 20 s" in text and "hygon.com/hcumem (MiB)" in text
    # hami-scheduler still serves the pods the webhook routes to it.
    assert "routes such pods to schedulerName hami-scheduler" in text


def test_node_side_only_notes_promise_no_scheduler(helm):
    docs, text = installed(helm, "--set", "scheduler.enabled=false")
    check_every_mode(text)
    assert not [d for d in docs if d["kind"] in ("Deployment", "MutatingWebhookConfiguration")]
    assert "the node side only (scheduler.enabled=false)" in text
    assert "installs no webhook, extender or scheduler" in text and "routes such pods" not in text
    assert "system:serviceaccount:kube-system:hami-scheduler, scheduler.external.identity" in text
    assert "helm test" not in text and "FilteringFailed" not in text
