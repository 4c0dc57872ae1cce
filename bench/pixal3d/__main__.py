"""``python -m bench.pixal3d``: see :mod:`bench.pixal3d.cli` and docs/benchmark.md."""
import sys

from .cli import main

sys.exit(main())
