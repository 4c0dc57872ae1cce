"""``python -m bench.export_engine``: see ``cli.py``."""
import sys

from .cli import main

sys.exit(main())
