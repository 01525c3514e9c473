"""The shape `hami-dcu status` gives every card table, device plugin or DRA alike (pure).

A card row counts what is used of what the card has in three figures, slots, memory and
cores, each written `used/total`; a summary line gives each as `used/total unit (percent)`.
Narrow, a card's shares share one cell; wide, each share has a row of its own, the card's cells
left blank under the first, as kubectl groups rows. The columns are aligned with two spaces
between them, and nothing a pod or node says about itself reaches the terminal unescaped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hami_dcu.common.protocol.untrusted import escape_controls

NO_SHARE = ("-", "", "")  # the share cells of a wide row for a card nobody holds a share of

Figure = tuple[int, int]  # (used, total)


def usage_cells(slots: Figure, memory: Figure, cores: Figure) -> list[str]:
    """The SLOTS, MEMORY and CORES cells of a card row."""
    return [f"{used}/{total}" for used, total in (slots, memory, cores)]


def shares_cell(shares: Iterable[str]) -> str:
    """A narrow row's last cell: every share on the card, or "-" for none."""
    return ", ".join(shares) or "-"


def grouped_rows(card_cells: Sequence[str], share_cells: Sequence[Sequence[str]]) -> list[list[str]]:
    """A wide table's rows for one card: the card's cells with its first share's, then one row
    per further share with the card's cells left blank."""
    first = share_cells[0] if share_cells else NO_SHARE
    rows = [[*card_cells, *first]]
    rows.extend([*([""] * len(card_cells)), *cells] for cells in share_cells[1:])
    return rows


def percent(used: int, total: int) -> str:
    return f"{100 * used / total:.1f}%" if total else "-"


def usage_text(slots: Figure, memory: Figure, cores: Figure, cores_unit: str) -> str:
    """A summary line's figures: `cores_unit` follows the cores' total ("%" or " CU")."""
    return (f"slots {slots[0]}/{slots[1]} ({percent(*slots)}), "
            f"memory {memory[0]}/{memory[1]} MiB ({percent(*memory)}), "
            f"cores {cores[0]}/{cores[1]}{cores_unit} ({percent(*cores)})")


def count_of(count: int, noun: str) -> str:
    """`1 node`, `2 nodes`, `0 nodes`."""
    return f"{count} {noun}{'s' if count != 1 else ''}"


def table(rows: Sequence[Sequence[str]]) -> str:
    """The rows as aligned columns, the first row the header; no trailing blanks on a line."""
    # Cells carry what pods and nodes say about themselves: nothing reaches the terminal unescaped.
    escaped = [[escape_controls(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in escaped) for i in range(len(escaped[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in escaped)
