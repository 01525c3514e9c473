"""Paths of the chart tests, in a module whose name no other test folder uses: pytest puts
every test folder on sys.path, so `from conftest import ...` finds whichever conftest was
imported first when several folders run in one call."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "chart"
