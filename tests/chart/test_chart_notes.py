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
