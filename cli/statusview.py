"""How `hami-dcu status` prints a `ClusterUsage` (pure: strings and plain data out).

* table (default): one row per card with the pods on it and their share, then one row per
  node with its plugin report and node lock, then one summary line for the cluster; in DRA
  mode one row per card with the claims on it; then the DCU pods that wait for a node, what
  they ask for and the latest reason they were given;
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
from hami_dcu.cli.drausage import ClaimShare, DraTaint, DraUsage
from hami_dcu.cli.pending import PendingPod
from hami_dcu.cli.tables import count_of, grouped_rows, shares_cell, table, usage_cells, usage_text
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import format_rfc3339

FORMATS = ("table", "wide", "json", "yaml")


def render(usage: ClusterUsage, output: str, pending: Sequence[PendingPod] = (), dra: DraUsage | None = None, *,
           naming: keys.Naming) -> str:
    """`naming`: the set `usage` was read in, named when no node registered cards."""
    if output == "json":
        return json.dumps(as_document(usage, pending, dra), indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(as_document(usage, pending, dra), sort_keys=False)
    return render_table(usage, wide=output == "wide", pending=pending, dra=dra, naming=naming)


def as_document(usage: ClusterUsage, pending: Sequence[PendingPod] = (), dra: DraUsage | None = None) -> dict[str, Any]:
    """The whole picture as JSON-compatible data (datetimes as RFC3339 strings)."""
    document: dict[str, Any] = _plain(dataclasses.asdict(usage))
    document["pending"] = [dataclasses.asdict(p) for p in pending]
    if dra is not None:
        document["dra"] = _plain(dataclasses.asdict(dra))
    return document


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return format_rfc3339(value)
    return value


# --- table ----------------------------------------------------------------------------------


def render_table(usage: ClusterUsage, wide: bool = False, pending: Sequence[PendingPod] = (),
                 dra: DraUsage | None = None, *, naming: keys.Naming) -> str:
    parts = []
    if usage.nodes:
        parts += [table(_card_rows(usage.nodes, wide)), "", table(_node_rows(usage.nodes, wide)), "",
                  summary_line(usage.summary)]
    if dra is not None and (dra.cards or dra.problems):
        if parts:
            parts.append("")
        parts += [table(_dra_rows(dra, wide)), "", dra_summary_line(dra)]
        parts += [f"problem: {problem}" for problem in dra.problems]
    if not parts:
        parts.append(f"no node has registered DCUs (no {naming.node_register} annotation and no ResourceSlice of "
                     "dra.hygon.com found)")
    if pending:
        parts += ["", table(_pending_rows(pending, wide))]
    return "\n".join(parts) + "\n"


def _card_rows(nodes: Sequence[NodeUsage], wide: bool) -> list[list[str]]:
    header = ["NODE", "CARD", "MODEL", "HEALTH", "SLOTS", "MEMORY (MiB)", "CORES (%)"]
    header += ["INDEX", "NUMA", "POD/CONTAINER", "SHARE", "BIND PHASE"] if wide else ["PODS"]
    rows = [header]
    for node in nodes:
        for card in node.cards:
            cells = [node.name, card.id, card.model, "healthy" if card.healthy else "UNHEALTHY",
                     *usage_cells((card.slots_used, card.slots_total), (card.memory_used_mib, card.memory_total_mib),
                                  (card.cores_used_percent, card.cores_total_percent))]
            if wide:
                rows += grouped_rows([*cells, str(card.index), str(card.numa)],
                                     [_share_cells(share) for share in card.shares])
            else:
                rows.append([*cells, shares_cell(f"{s.owner} {_share(s)}" for s in card.shares)])
    return rows


def _dra_rows(dra: DraUsage, wide: bool) -> list[list[str]]:
    header = ["NODE", "DEVICE", "MODEL", "TAINTS", "SLOTS", "MEMORY (MiB)", "CORES (CU)"]
    header += ["SERIAL", "CLAIM", "SHARE", "PODS"] if wide else ["CLAIMS"]
    rows = [header]
    for card in dra.cards:
        cells = [card.node, card.device, card.model or "-", taints_text(card.taints, wide),
                 *usage_cells((card.slots_used, card.slots_total), (card.memory_used_mib, card.memory_total_mib),
                              (card.cores_used, card.cores_total))]
        if wide:
            rows += grouped_rows([*cells, card.serial or "-"],
                                 [_claim_cells(share, card.cores_total) for share in card.shares])
        else:
            rows.append([*cells, shares_cell(f"{s.owner} {_claim_share(s, card.cores_total)}" for s in card.shares)])
    return rows


def taints_text(taints: Sequence[DraTaint], wide: bool = False) -> str:
    """`key=value:effect` per taint (a rule's named), "-" for none; wide adds since when."""
    if not taints:
        return "-"
    return "; ".join(t.text + (f" since {t.time_added}" if wide and t.time_added else "") for t in taints)


def _claim_share(share: ClaimShare, cores_total: int) -> str:
    if share.whole:
        return "(whole card)"
    percent = f" = {100 * share.cores / cores_total:.0f}%" if cores_total else ""
    return f"({share.memory_mib} MiB, {share.cores} CU{percent})"


def _claim_cells(share: ClaimShare, cores_total: int) -> list[str]:
    return [share.owner, _claim_share(share, cores_total).strip("()"), ", ".join(share.pods) or "(not in use)"]


def dra_summary_line(dra: DraUsage) -> str:
    cards = dra.cards
    nodes = len({c.node for c in cards})
    slots = (sum(c.slots_used for c in cards), sum(c.slots_total for c in cards))
    memory = (sum(c.memory_used_mib for c in cards), sum(c.memory_total_mib for c in cards))
    cores = (sum(c.cores_used for c in cards), sum(c.cores_total for c in cards))
    tainted = sum(1 for c in cards if c.taints)
    counted = f"{len(cards)} cards" + (f" ({tainted} tainted)" if tainted else "")
    return (f"dra.hygon.com: {count_of(nodes, 'node')}, {counted}, {usage_text(slots, memory, cores, ' CU')}, "
            f"{count_of(dra.claims, 'claim')}")


def _pending_rows(pending: Sequence[PendingPod], wide: bool) -> list[list[str]]:
    rows = [["PENDING POD", "REQUEST", "AGE", "REASON"] + (["FROM"] if wide else [])]
    for pod in pending:
        reason = pod.reason if wide or len(pod.reason) <= 160 else pod.reason[:157] + "..."
        rows.append([f"{pod.namespace}/{pod.name}", pod.request, age(pod.age_seconds), reason]
                    + ([pod.reason_source or "-"] if wide else []))
    return rows


def _share(share: Share) -> str:
    return f"({share.memory_mib} MiB, {share.cores_percent}%)"


def _share_cells(share: Share) -> list[str]:
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


def summary_line(summary: Summary) -> str:
    s = summary
    figures = usage_text((s.slots_used, s.slots_total), (s.memory_used_mib, s.memory_total_mib),
                         (s.cores_used_percent, s.cores_total_percent), "%")
    return (f"cluster: {count_of(s.nodes, 'node')}, {s.cards} cards ({s.healthy_cards} healthy), {figures}, "
            f"{count_of(s.pods, 'pod')}")
