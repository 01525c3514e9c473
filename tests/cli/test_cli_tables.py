"""The card table shape both status tables print (cli/tables.py), pinned to the character:
the device plugin's and DRA's tables and summary lines are built from it."""

from hami_dcu.cli.tables import NO_SHARE, count_of, grouped_rows, percent, shares_cell, table, usage_cells, usage_text


def test_usage_cells_are_used_over_total_in_slots_memory_cores_order():
    assert usage_cells((1, 4), (2048, 65520), (30, 100)) == ["1/4", "2048/65520", "30/100"]


def test_the_shares_cell_joins_shares_and_shows_a_dash_for_none():
    assert shares_cell(["ns/a (1 MiB, 5%)", "ns/b (2 MiB, 10%)"]) == "ns/a (1 MiB, 5%), ns/b (2 MiB, 10%)"
    assert shares_cell(iter([])) == "-"


def test_wide_rows_leave_the_cards_cells_blank_under_the_first_share():
    card = ["n1", "DCU-0", "1/2"]
    assert grouped_rows(card, [["ns/a", "1 MiB", "-"], ["ns/b", "2 MiB", "bound"]]) == [
        ["n1", "DCU-0", "1/2", "ns/a", "1 MiB", "-"],
        ["", "", "", "ns/b", "2 MiB", "bound"],
    ]
    assert grouped_rows(card, []) == [["n1", "DCU-0", "1/2", *NO_SHARE]]
    assert NO_SHARE == ("-", "", "")


def test_percent_has_one_decimal_and_a_dash_for_nothing_to_use():
    assert percent(1, 3) == "33.3%"
    assert percent(0, 8) == "0.0%"
    assert percent(5, 0) == "-"


def test_usage_text_puts_the_cores_unit_after_the_total():
    assert usage_text((1, 4), (512, 1024), (25, 100), "%") == (
        "slots 1/4 (25.0%), memory 512/1024 MiB (50.0%), cores 25/100% (25.0%)")
    assert usage_text((0, 0), (0, 0), (60, 120), " CU") == (
        "slots 0/0 (-), memory 0/0 MiB (-), cores 60/120 CU (50.0%)")


def test_count_of_is_singular_for_one_only():
    assert [count_of(n, "node") for n in (0, 1, 2)] == ["0 nodes", "1 node", "2 nodes"]


def test_table_aligns_columns_two_spaces_apart_without_trailing_blanks():
    assert table([["NODE", "SLOTS", "PODS"], ["node-long", "1/4", "-"], ["n", "10/10", ""]]) == (
        "NODE       SLOTS  PODS\n"
        "node-long  1/4    -\n"
        "n          10/10")


def test_table_escapes_control_characters_before_measuring():
    rendered = table([["A", "B"], ["x\x1b[31m", "y"]])
    assert "\x1b" not in rendered
    first, second = rendered.split("\n")
    assert second.index("y") == first.index("B")
