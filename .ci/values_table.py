"""The chart values tables of chart/README.md (every value), README.md and README.zh-CN.md (the
values most installs set), generated from chart/values.schema.json (what each value accepts, and
its `description`) and chart/values.yaml (its default).

Usage (from the checkout):
    python .ci/values_table.py          # rewrite the tables in place
    python .ci/values_table.py --check  # list the documents whose table is stale; exit 1 if one is

A developer's tool, not the product's: nothing installed calls it (tests/test_values_table.py
runs it in the fast suite). A value is one row when the schema describes it and none of its
properties; otherwise its properties are walked. A value the schema does not describe is an
error: every value the chart takes is documented, or the table cannot be generated. README.zh-CN.md
gives each of its rows the Chinese description of values_table.zh-CN.yaml, which must have one
for every row.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "chart" / "values.schema.json"
VALUES = ROOT / "chart" / "values.yaml"
BEGIN = "<!-- BEGIN values table: generated from chart/values.schema.json by .ci/values_table.py; do not edit -->"
END = "<!-- END values table -->"
# The values most installs set, in README.md and README.zh-CN.md (chart/README.md has them all).
README_VALUES = (
    "image.repository", "image.tag", "global.imageRegistry", "mode", "naming", "scheduler.name",
    "scheduler.replicas", "scheduler.nodePolicy", "scheduler.devicePolicy", "webhook.failurePolicy",
    "webhook.clientAuth.enabled", "devicePlugin.nodeSelector", "devicePlugin.driverDir",
    "devicePlugin.slotsPerCard", "devicePlugin.metricsPort", "volcano.enabled", "metrics.serviceMonitor.enabled",
    "networkPolicy.apiServer.cidrs",
)
# README.zh-CN.md's words and descriptions (a data file: Chinese punctuation is not Python's).
ZH_FILE = Path(__file__).with_name("values_table.zh-CN.yaml")
ZH_DATA = yaml.safe_load(ZH_FILE.read_text())
ZH: dict[str, str] = ZH_DATA["descriptions"]
# Each document with a table: its header row, the values it lists (None: every one), for
# README.zh-CN.md the descriptions it gives them, and the language of its other columns.
DOCUMENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...] | None, dict[str, str] | None, str]] = {
    "chart/README.md": (("value", "default", "accepts", "what it sets"), None, None, "en"),
    "README.md": (("value", "default", "accepts", "what it sets"), README_VALUES, None, "en"),
    "README.zh-CN.md": (("值", "默认值", "取值", "作用"), README_VALUES, ZH, "zh-CN"),
}
MAX_DEFAULT = 70  # a longer default is left to values.yaml


class Undocumented(Exception):
    pass


def resolve(node: dict, schema: dict) -> dict:
    ref = node.get("$ref")
    if ref:
        assert ref.startswith("#/definitions/"), ref
        return {**schema["definitions"][ref.rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def leaves(node: dict, schema: dict, path: tuple[str, ...] = ()) -> Iterator[tuple[str, dict]]:
    """(dotted path, schema node) of every documented value, in the schema's order."""
    node = resolve(node, schema)
    props = node.get("properties") or {}
    described_children = any("description" in resolve(p, schema) or (resolve(p, schema).get("properties"))
                              for p in props.values())
    if path and "description" in node and not (props and described_children):
        yield ".".join(path), node
        return
    if not props:
        raise Undocumented(f"chart/values.schema.json: {'.'.join(path) or '(root)'} has no description")
    for name, child in props.items():
        yield from leaves(child, schema, (*path, name))


# The words the accepts and default columns are written in, per language.
WORDS = {
    "en": {"integer": "integer", "number": "number", "string": "string", "boolean": "`true`, `false`",
           "object": "map", "array": "list", "or": " or ", "non-empty": "non-empty string", "from": " from {}",
           "above": " above {}", "range": " {}-{}", "see": "see values.yaml", "entries": "{} entries, see values.yaml",
           "entry": "1 entry, see values.yaml", "none": "(none)"},
    "zh-CN": ZH_DATA["words"],
}


def default_of(values: dict, path: str, lang: str = "en") -> str:
    words = WORDS[lang]
    node: Any = values
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return words["none"]
        node = node[part]
    if node is None:
        return "`null`"
    if isinstance(node, bool):
        return f"`{str(node).lower()}`"
    if node == "":
        return '`""`'
    if isinstance(node, dict) and node and all(isinstance(v, dict) for v in node.values()):
        # resources: "limits cpu 1, memory 512Mi; requests cpu 100m, memory 128Mi"
        return "; ".join(f"{k} " + ", ".join(f"{kk} {vv}" for kk, vv in v.items()) for k, v in node.items())
    if isinstance(node, (dict, list)):
        text = yaml.safe_dump(node, default_flow_style=True, width=10_000).strip()
        if len(text) > MAX_DEFAULT:
            if isinstance(node, dict):
                return words["see"]
            return words["entry"] if len(node) == 1 else words["entries"].format(len(node))
        return f"`{text}`"
    return f"`{node}`"


def accepts(node: dict, lang: str = "en") -> str:
    words = WORDS[lang]
    if "enum" in node:
        return ", ".join(f"`{json.dumps(v) if not isinstance(v, str) else v}`" for v in node["enum"])
    kinds = node.get("type", "")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if kinds == ["string"] and node.get("minLength"):
        return words["non-empty"]
    text = words["or"].join(words.get(k, k) for k in kinds) or "any"
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None and high is not None:
        text += words["range"].format(low, high)
    elif low is not None:
        text += words["from"].format(low)
    elif node.get("exclusiveMinimum") is not None:
        text += words["above"].format(node["exclusiveMinimum"])
    return text


Row = tuple[str, str, str, str]


def rows(only: tuple[str, ...] | None = None, descriptions: dict[str, str] | None = None, lang: str = "en",
         schema: dict | None = None, values: dict | None = None) -> list[Row]:
    """The table's rows: every documented value, or those of `only` in that order; each with
    its description from `descriptions` when given (KeyError: one is missing)."""
    schema = schema if schema is not None else json.loads(SCHEMA.read_text())
    values = values if values is not None else yaml.safe_load(VALUES.read_text())
    found = dict(leaves(schema, schema))
    if only is not None:
        unknown = [p for p in only if p not in found]
        if unknown:
            raise Undocumented(f"not a documented value of chart/values.schema.json: {', '.join(unknown)}")
        found = {p: found[p] for p in only}
    return [(f"`{path}`", default_of(values, path, lang), accepts(node, lang),
             descriptions[path] if descriptions is not None else node["description"])
            for path, node in found.items()]


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(header: tuple[str, ...], body: list[Row]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def rendered(text: str, header: tuple[str, ...], body: list[Row]) -> str:
    """`text` with the table between its markers replaced (ValueError: no markers)."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + table(header, body) + "\n" + text[end:]


def expected(name: str, root: Path | None = None) -> str:
    """The document `name` (below `root`, the checkout by default) as it should be: its table
    generated now."""
    header, only, descriptions, lang = DOCUMENTS[name]
    return rendered(((root or ROOT) / name).read_text(), header, rows(only, descriptions, lang))


def stale(root: Path | None = None) -> list[str]:
    return [name for name in DOCUMENTS if expected(name, root) != ((root or ROOT) / name).read_text()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list stale tables; exit 1 if there is one")
    args = parser.parse_args(argv)
    try:
        outdated = stale()
    except (Undocumented, KeyError, ValueError) as exc:
        print(f"values_table: {exc}", file=sys.stderr)
        return 1
    if args.check:
        for name in outdated:
            print(f"stale: {name} (python .ci/values_table.py)")
        return 1 if outdated else 0
    for name in outdated:
        (ROOT / name).write_text(expected(name))
        print(f"rewrote the values table of {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
