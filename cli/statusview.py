"""How `hami-dcu status` prints a `ClusterUsage` (pure: strings and plain data out).

* table (default): one row per card with the pods on it and their share, then one row per
  node with its plugin report and node lock, then one summary line for the cluster;
* wide: the card table gets INDEX, NUMA and one row per share (with its bind phase), and
  the node table lists each node's problems;
* json / yaml: everything, times in RFC3339 and ages in seconds, for scripts.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import yaml

from hami_dcu.cli.cardusage import ClusterUsage, LockInfo, NodeUsage, PluginReport, Share, Summary
from hami_dcu.common import keys
from hami_dcu.common.codec import format_rfc3339

FORMATS = ("table", "wide", "json", "yaml")


def render(usage: ClusterUsage, output: str) -> str:
    if output == "json":
        return json.dumps(as_document(usage), indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(as_document(usage), sort_keys=False)
    return render_table(usage, wide=output == "wide")


def as_document(usage: ClusterUsage) -> dict[str, Any]:
    """The whole picture as JSON-compatible data (datetimes as RFC3339 strings)."""
    return _plain(dataclasses.asdict(usage))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return format_rfc3339(value)
    return value


# --- table ----------------------------------------------------------------------------------


def render_table(usage: ClusterUsage, wide: bool = False) -> str:
    if not usage.nodes:
        return "no node has registered DCUs (no hami.io/node-dcu-register annotation found)\n"
    card_rows = _card_rows(usage.nodes, wide)
    node_rows = _node_rows(usage.nodes, wide)
    return "\n".join([_table(card_rows), "", _table(node_rows), "", summary_line(usage.summary)]) + "\n"


def _card_rows(nodes: Sequence[NodeUsage], wide: bool) -> list[list[str]]:
    header = ["NODE", "CARD", "MODEL", "HEALTH", "SLOTS", "MEMORY (MiB)", "CORES (%)"]
    header += ["INDEX", "NUMA", "POD/CONTAINER", "SHARE", "BIND PHASE"] if wide else ["PODS"]
    rows = [header]
    for node in nodes:
        for card in node.cards:
            cells = [node.name, card.id, card.model, "healthy" if card.healthy else "UNHEALTHY",
                     f"{card.slots_used}/{card.slots_total}",
                     f"{card.memory_used_mib}/{card.memory_total_mib}",
                     f"{card.cores_used_percent}/{card.cores_total_percent}"]
            if not wide:
                rows.append([*cells, ", ".join(f"{s.owner} {_share(s)}" for s in card.shares) or "-"])
                continue
            first, *rest = card.shares or [None]
            card_cells = [*cells, str(card.index), str(card.numa)]
            rows.append([*card_cells, *_share_cells(first)])
            # Further shares of the same card: the card's cells left blank, as kubectl groups rows.
            rows.extend([*([""] * len(card_cells)), *_share_cells(share)] for share in rest)
    return rows


def _share(share: Share) -> str:
    return f"({share.memory_mib} MiB, {share.cores_percent}%)"


def _share_cells(share: Share | None) -> list[str]:
    if share is None:
        return ["-", "", ""]
    return [share.owner, f"{share.memory_mib} MiB, {share.cores_percent}%", share.bind_phase or "-"]


def _node_rows(nodes: Sequence[NodeUsage], wide: bool) -> list[list[str]]:
    header = ["NODE", "PLUGIN REPORT", "NODE LOCK"] + (["PROBLEMS"] if wide else [])
    rows = [header]
    for node in nodes:
        cells = [node.name, report_text(node.report), lock_text(node.lock)]
        if wide:
            cells.append("; ".join(node.problems) or "-")
        elif node.problems:
            cells[-1] += f"  ({len(node.problems)} problem{'s' if len(node.problems) > 1 else ''}: -o wide)"
        rows.append(cells)
    return rows


def report_text(report: PluginReport | None) -> str:
    if report is None:
        return "never"
    if report.state == keys.HANDSHAKE_REPORTED:
        return f"{age(report.age_seconds)} ago" if report.age_seconds is not None else "reported (time unreadable)"
    if report.state == keys.HANDSHAKE_REQUESTING:
        when = f" {age(report.age_seconds)} ago" if report.age_seconds is not None else ""
        return f"requested by {'Volcano' if report.by_volcano else 'a HAMi scheduler'}{when}, no reply yet"
    if report.state == keys.HANDSHAKE_DELETED:
        return "dropped by Volcano (no reply for 60s)" if report.by_volcano else "deleted (plugin stopped)"
    return "unknown value"


def lock_text(lock: LockInfo | None) -> str:
    if lock is None:
        return "free"
    if lock.age_seconds is None:
        return lock.holder
    return f"held by {lock.holder} for {age(lock.age_seconds)}"


def age(seconds: float | None) -> str:
    """kubectl's style: 45s, 3m10s, 2h5m, 4d3h. A clock ahead of ours shows as 0s."""
    if seconds is None:
        return "?"
    total = max(0, int(seconds))
    days, rem = divmod(total, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def _percent(used: int, total: int) -> str:
    return f"{100 * used / total:.1f}%" if total else "-"


def summary_line(summary: Summary) -> str:
    s = summary
    return (f"cluster: {s.nodes} node{'s' if s.nodes != 1 else ''}, {s.cards} cards ({s.healthy_cards} healthy), "
            f"slots {s.slots_used}/{s.slots_total} ({_percent(s.slots_used, s.slots_total)}), "
            f"memory {s.memory_used_mib}/{s.memory_total_mib} MiB ({_percent(s.memory_used_mib, s.memory_total_mib)}), "
            f"cores {s.cores_used_percent}/{s.cores_total_percent}% "
            f"({_percent(s.cores_used_percent, s.cores_total_percent)}), {s.pods} pod{'s' if s.pods != 1 else ''}")


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)

