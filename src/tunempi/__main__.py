from __future__ import annotations

from tunempi.cli.main import main

main()
