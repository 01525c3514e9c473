"""e2e/importgraph.py: the import graph between top-level packages, read from a source tree."""

import subprocess
import sys
from pathlib import Path

from e2e import importgraph

SCRIPT = Path(importgraph.__file__)


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_counts_imports_between_packages_only(tmp_path):
    root = tree(tmp_path, {
        "alpha/__init__.py": "",
        "alpha/one.py": "from hami_dcu.beta import x\nimport hami_dcu.beta.y\nfrom hami_dcu.alpha import two\n",
        "alpha/two.py": "def late():\n    from hami_dcu.gamma.z import f\n    return f\n",
        "beta/__init__.py": "",
        "beta/x.py": "import os\nfrom hami_dcu import alpha\n",
        "gamma/__init__.py": "",
        "gamma/z.py": "",
        "notapackage/m.py": "from hami_dcu.alpha import one\n",
    })
    static, by_name = importgraph.graph(root)
    assert static == {("alpha", "beta"): 2, ("alpha", "gamma"): 1, ("beta", "alpha"): 1}
    assert not by_name


def test_a_folder_imported_by_its_own_name_counts_for_it(tmp_path):
    root = tree(tmp_path, {
        "alpha/__init__.py": "",
        "harness/__init__.py": "from harness.tools import x\nfrom hami_dcu.alpha import y\n",
        "harness/tools.py": "",
        "beta/__init__.py": "import harness.tools\nimport os.path\n",
    })
    static, _ = importgraph.graph(root)
    assert static == {("harness", "alpha"): 1, ("beta", "harness"): 1}


def test_resolves_relative_imports(tmp_path):
    root = tree(tmp_path, {
        "alpha/__init__.py": "from ..beta import x\n",
        "alpha/sub/__init__.py": "",
        "alpha/sub/deep.py": "from ...beta.x import f\nfrom .. import one\n",
        "beta/__init__.py": "",
        "beta/x.py": "",
    })
    static, _ = importgraph.graph(root)
    assert static == {("alpha", "beta"): 2}


def test_module_names_in_strings_are_counted_apart(tmp_path):
    root = tree(tmp_path, {
        "alpha/__init__.py": "",
        "alpha/main.py": 'LOADERS = ("hami_dcu.beta.command", "hami_dcu.alpha.x", "not hami_dcu.beta")\n',
        "beta/__init__.py": "",
    })
    static, by_name = importgraph.graph(root)
    assert not static
    assert by_name == {("alpha", "beta"): 1}


def test_runs_as_a_plain_script(tmp_path):
    root = tree(tmp_path, {
        "alpha/__init__.py": "from hami_dcu.beta import x\n",
        "beta/__init__.py": 'NAME = "hami_dcu.alpha.main"\n',
    })
    out = subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, check=True,
                         cwd=tmp_path)
    assert out.stdout.splitlines() == ["alpha -> beta (1 imports)", "beta -> alpha (1 by name)"]
