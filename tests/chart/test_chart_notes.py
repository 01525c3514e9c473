"""NOTES.txt tells the truth for any nodeSelector and slot count."""

import subprocess

from chart_paths import CHART


def notes(helm, *values: str) -> str:
    done = subprocess.run([str(helm), "install", "hami-dcu", str(CHART), "-n", "kube-system", "--dry-run=client",
                           *values], capture_output=True, text=True, check=True)
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
    old = subprocess.run([str(helm), "template", "x", str(CHART), "--set", "mode=dra", "--kube-version", "1.33.4"],
                         capture_output=True, text=True)
    assert old.returncode != 0
    assert "mode=dra needs Kubernetes 1.34 or later" in old.stderr and "this cluster is v1.33.4" in old.stderr
    assert "use mode=devicePlugin" in old.stderr
    for version in ("1.34.0", "1.36.1"):
        subprocess.run([str(helm), "template", "x", str(CHART), "--set", "mode=dra", "--kube-version", version],
                       capture_output=True, text=True, check=True)
    subprocess.run([str(helm), "template", "x", str(CHART), "--kube-version", "1.30.0"], capture_output=True,
                   text=True, check=True)  # device-plugin mode: any supported version


def test_the_documented_policy_chain_renders(render):
    """README's example: a comma inside a --set value is escaped, or the value is given with -f."""
    for flag in ("--set", "--set-string"):
        docs = render(flag, "scheduler.devicePolicy=binpack\\,numa")
        (scheduler,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("scheduler")]
        args = [a for c in scheduler["spec"]["template"]["spec"]["containers"] for a in c.get("args") or []]
        assert "--device-policy=binpack,numa" in args
    readme = (CHART.parent / "README.md").read_text() + (CHART / "README.md").read_text()
    assert "--set 'scheduler.devicePolicy=binpack\\,numa'" in readme
