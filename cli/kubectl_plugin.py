"""`kubectl-hami_dcu`: the kubectl plugin, so `kubectl hami-dcu status` runs `hami-dcu status`.

kubectl finds plugins on PATH by name (a dash in the command is an underscore in the file
name) and passes the remaining arguments, and its environment (KUBECONFIG) along.
"""

from __future__ import annotations

import sys

from hami_dcu.cli.main import main as hami_dcu_main


def main() -> int:
    return hami_dcu_main(sys.argv[1:], prog="kubectl hami-dcu")


if __name__ == "__main__":
    sys.exit(main())
