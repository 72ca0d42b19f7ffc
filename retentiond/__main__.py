"""Allows ``python -m retentiond``."""

from retentiond.cli import main

raise SystemExit(main())
