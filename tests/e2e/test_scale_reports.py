"""bench/scale.py's node reports line: HARNESS BEHIND when two reports of one simulated node
came further apart than the extender's limit (the node looked dead to /filter), not when
reports were only late or skipped within it, as at 5,000 nodes on 2 cores."""

from __future__ import annotations

import sys
from pathlib import Path

from prometheus_client import generate_latest

from e2e.realcluster.nodesim import REPORT_LIMIT_SECONDS, ReportGaps, SimMetrics

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import scale  # noqa: E402


def measured(gaps: list[float], skipped: int = 0) -> scale.Measured:
    before = SimMetrics()
    after = SimMetrics()
    for gap in gaps:
        after.report_gap_seconds.observe(gap)
        after.report_delay_seconds.observe(gap - 30)
        after.registrations.labels("ok").inc()
    after.registrations.labels("late").inc(skipped)
    return scale.Measured(burst=None, before=scale.Scrape(nodesim=generate_latest(before.registry).decode()),  # type: ignore[arg-type]
                          after=scale.Scrape(nodesim=generate_latest(after.registry).decode()))


def test_late_and_skipped_reports_within_the_limit_are_not_the_harness_behind():
    line = scale.reports_line(measured([30.0, 40.0, REPORT_LIMIT_SECONDS - 1], skipped=2))
    assert "2 skipped" in line and "0 of 3 gaps" in line and "HARNESS BEHIND" not in line


def test_a_gap_past_the_extenders_limit_is():
    line = scale.reports_line(measured([30.0, REPORT_LIMIT_SECONDS + 5, 95.0]))
    assert "2 of 3 gaps" in line and "HARNESS BEHIND: nodes looked dead (2 gaps over the limit)" in line


def test_the_simulator_measures_the_gap_between_a_nodes_reports():
    metrics = SimMetrics()
    gaps = ReportGaps(metrics.report_gap_seconds)
    gaps.written("n", 100.0)
    gaps.written("n", 170.0)
    gaps.written("m", 120.0)  # a first report: no gap yet
    text = generate_latest(metrics.registry).decode()
    assert "hami_dcu_nodesim_report_gap_seconds_count 1.0" in text
    assert 'hami_dcu_nodesim_report_gap_seconds_bucket{le="60.0"} 0.0' in text
    assert 'hami_dcu_nodesim_report_gap_seconds_bucket{le="90.0"} 1.0' in text
