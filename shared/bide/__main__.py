"""``python -m bide``: the command line (see :mod:`bide.cli`)."""

from .cli import main

raise SystemExit(main())
