"""`hami-dcu demo` runs the whole system and prints what a person needs to see."""

from hami_dcu.cli.main import main


def test_demo_places_pods_explains_the_rest_and_exits_zero(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(("train-15pct", "whole-card", "two-workers"))]
    train = next(r for r in rows if r[0] == "train-15pct")
    assert train[4:7] == ["2000", "MiB", "15%"] and train[7] == "0x000000000003ffff"
    assert any(r[0] == "whole-card" and r[-2:] == ["whole", "card"] for r in rows)
    assert sum(1 for r in rows if r[0] == "two-workers") == 2  # two DCU containers, the middle one has none
    assert "too-big is Pending (FailedScheduling): 0/2 nodes are available: 2 insufficient card memory" in out
    assert "too-big is Pending (FilteringFailed):" in out and "MiB free < 70000 MiB requested" in out
    assert "init-share was refused at admission" in out
    assert "cu_count: 18" in out and "mem: 2000 MiB" in out
    assert out.rstrip().endswith("local cluster stopped")


def test_demo_speaks_the_naming_set_it_is_given(capsys):
    assert main(["demo", "--naming", "hcu"]) == 0
    out = capsys.readouterr().out
    train = next(line.split() for line in out.splitlines() if line.startswith("train-15pct"))
    assert train[3].startswith("HCU-NODE0S") and train[4:7] == ["2000", "MiB", "15%"]
    assert "DCU-" not in out and "renamed" not in out  # its pods were written in the hcu names


def test_cli_lists_every_subcommand(capsys):
    try:
        main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    for name in ("webhook", "scheduler", "device-plugin", "certs", "demo"):
        assert name in out
    assert "not available" not in out
