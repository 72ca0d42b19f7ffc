"""``python -m retentiond.analytics`` and ``spark-submit .../retentiond/analytics/__main__.py``."""

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from retentiond.commands.analyze import main

raise SystemExit(main())
