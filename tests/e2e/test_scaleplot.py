"""bench/plot.py: the README's plot is the recorded runs redrawn (docs/scale-runs.txt ->
docs/scale.svg), a bad line is refused with its number, and each series is what its runs say."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import plot  # noqa: E402

RUNS = """\
# 2026-11-28 python bench/scale.py --mode dra --nodes 1000 --pods 2000
scale-dra-floor: nodes=1000 pods=2000 dra_pods_per_s=10.1 floor_pods_per_s=12.0 ratio=1.19
scale-dra: nodes=1000 pods=2000 dcu_pods_per_s=10.1 plain_pods_per_s=27.5 ratio=2.71
scale: nodes=1000 pods=2000 dcu_pods_per_s=30.0 plain_pods_per_s=50.0 ratio=1.67
scale: nodes=1000 pods=2000 dcu_pods_per_s=34.0 plain_pods_per_s=52.0 ratio=1.53
scale: nodes=20 pods=200 dcu_pods_per_s=39.0 plain_pods_per_s=98.0 ratio=2.51
"""


def test_each_series_takes_the_median_and_range_of_its_runs_per_node_count() -> None:
    series = plot.points(RUNS)
    assert series[plot.DCU] == [plot.Point(20, 39.0, 39.0, 39.0), plot.Point(1000, 32.0, 30.0, 34.0)]
    assert series[plot.DRA] == [plot.Point(1000, 10.1, 10.1, 10.1)]
    assert series[plot.FLOOR] == [plot.Point(1000, 12.0, 12.0, 12.0)]
    # plain pods from both modes' runs
    assert series[plot.PLAIN] == [plot.Point(20, 98.0, 98.0, 98.0), plot.Point(1000, 50.0, 27.5, 52.0)]


def test_the_svg_has_one_line_per_series_and_a_point_per_node_count() -> None:
    drawn = plot.svg(plot.points(RUNS))
    assert drawn.count("<polyline") == 4
    assert drawn.count("<circle") == 2 + 1 + 1 + 2
    assert all(name in drawn for name in plot.SERIES)
    assert drawn == plot.svg(plot.points(RUNS))  # the same input, the same bytes


@pytest.mark.parametrize("bad, says", [
    ("scale: nodes=20 pods=40\n", "line 1: scale without dcu_pods_per_s, plain_pods_per_s"),
    ("# a run\nratio 2.5\n", "line 2: not a line bench/scale.py ends with"),
    ("# only comments\n", "no runs to plot"),
])
def test_a_bad_runs_file_is_refused_with_its_line(bad: str, says: str) -> None:
    with pytest.raises(plot.RunsError, match=says):
        plot.svg(plot.points(bad))


def test_the_command_says_what_is_wrong_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs, out = tmp_path / "runs.txt", tmp_path / "out.svg"
    runs.write_text("scale: nodes=x\n")
    assert plot.main([str(runs), "-o", str(out)]) == 2
    assert "runs.txt: line 1" in capsys.readouterr().err
    assert not out.exists()


def test_the_committed_plot_is_the_recorded_runs_redrawn() -> None:
    recorded = (ROOT / "docs" / "scale-runs.txt").read_text()
    assert (ROOT / "docs" / "scale.svg").read_text() == plot.svg(plot.points(recorded)), (
        "docs/scale.svg is not docs/scale-runs.txt redrawn: python bench/plot.py docs/scale-runs.txt -o docs/scale.svg")
