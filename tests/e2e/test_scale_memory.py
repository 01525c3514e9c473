"""bench/scale.py's verdict on the extender's memory: its peak RSS against the chart's limit
(issue 40: at most half of it, in every run, printed by the bench)."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import scale  # noqa: E402


def test_the_limit_is_the_charts_unless_the_runs_values_override_it():
    chart = yaml.safe_load((ROOT / "chart" / "values.yaml").read_text())
    assert chart["scheduler"]["extenderResources"]["limits"]["memory"] == "1Gi"
    assert scale.extender_memory_limit_mib() == 1024
    assert scale.extender_memory_limit_mib({"scheduler": {"extenderResources": {"limits": {"memory": "768Mi"}}}}) == 768
    assert scale.extender_memory_limit_mib({"devicePlugin": {}}) == 1024


def test_a_peak_over_half_the_limit_is_called_out():
    assert scale.memory_verdict(512, 1024) == "50% of the chart's limit 1024 MiB, within half of it"
    assert scale.memory_verdict(717, 1024) == "70% of the chart's limit 1024 MiB, OVER HALF OF IT"
