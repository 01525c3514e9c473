"""The chart values tables (chart/README.md: every value; README.md and README.zh-CN.md: the
values most installs set) are what .ci/values_table.py generates from chart/values.schema.json
and chart/values.yaml, and the generator refuses a value the schema does not describe (issue 39)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("values_table", ROOT / ".ci" / "values_table.py")
assert _spec is not None and _spec.loader is not None
values_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(values_table)

SCHEMA = json.loads((ROOT / "chart" / "values.schema.json").read_text())
VALUES = yaml.safe_load((ROOT / "chart" / "values.yaml").read_text())


def table_rows(text: str) -> list[list[str]]:
    """The generated table's rows (header and separator left out), cell by cell."""
    body = text[text.index(values_table.BEGIN) + len(values_table.BEGIN):text.index(values_table.END)]
    lines = [line for line in body.strip().splitlines()][2:]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def value_paths(node: dict, path: tuple[str, ...] = ()) -> list[str]:
    """Every leaf of values.yaml (a map's keys walked, a list or an empty map a leaf)."""
    if isinstance(node, dict) and node:
        return [p for k, v in node.items() for p in value_paths(v, (*path, k))]
    return [".".join(path)]


def test_every_table_is_current():
    assert values_table.stale() == [], "stale: python .ci/values_table.py"
    assert values_table.main(["--check"]) == 0


def test_every_value_of_values_yaml_has_a_row_in_the_chart_readme():
    rows = {row[0].strip("`") for row in table_rows((ROOT / "chart" / "README.md").read_text())}
    missing = [p for p in value_paths(VALUES) if not any(p == r or p.startswith(r + ".") for r in rows)]
    assert not missing, f"values without a row (give them a description in values.schema.json): {missing}"
    assert len(rows) >= 90


def test_the_rows_say_the_defaults_of_values_yaml():
    rows = {row[0].strip("`"): row for row in table_rows((ROOT / "chart" / "README.md").read_text())}
    assert rows["scheduler.lockTimeoutSeconds"][1:3] == ["`300`", "integer from 10"]
    assert rows["devicePlugin.slotsPerCard"][1:3] == ["`4`", "integer 1-16"]
    assert rows["mode"][1:3] == ["`devicePlugin`", "`devicePlugin`, `dra`"]
    assert rows["scheduler.resources"][1] == "requests cpu 100m, memory 128Mi; limits cpu 1, memory 512Mi"


def test_the_readmes_list_the_same_values_in_the_same_order():
    english = table_rows((ROOT / "README.md").read_text())
    chinese = table_rows((ROOT / "README.zh-CN.md").read_text())
    assert [r[0] for r in english] == [r[0] for r in chinese] == [f"`{p}`" for p in values_table.README_VALUES]
    assert [r[1] for r in english] != [] and all(r[3] for r in chinese)
    assert set(values_table.ZH) == set(values_table.README_VALUES), "values_table.zh-CN.yaml: one description each"


def test_a_value_without_a_description_cannot_be_tabled():
    schema = json.loads(json.dumps(SCHEMA))
    del schema["properties"]["scheduler"]["properties"]["lockWaitSeconds"]["description"]
    with pytest.raises(values_table.Undocumented, match=r"scheduler\.lockWaitSeconds"):
        values_table.rows(schema=schema, values=VALUES)


def test_a_stale_table_is_found_and_rewritten(tmp_path, monkeypatch):
    for name in values_table.DOCUMENTS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    text = (tmp_path / "README.md").read_text()
    (tmp_path / "README.md").write_text(text.replace("| `mode` | `devicePlugin` |", "| `mode` | `dra` |"))
    assert values_table.stale(tmp_path) == ["README.md"]
    monkeypatch.setattr(values_table, "ROOT", tmp_path)
    assert values_table.main(["--check"]) == 1
    assert values_table.main([]) == 0
    assert values_table.stale(tmp_path) == []
    assert (tmp_path / "README.md").read_text() == text
