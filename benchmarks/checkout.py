"""The checkout the benchmarks run from, first on sys.path.

`python benchmarks/NAME.py` puts only benchmarks/ on sys.path; a script then imports this module (`import
checkout`), which adds the checkout above it, so that `benchmarks.*` and this checkout's `vanilla_transformer`
import as they do under `python -m benchmarks.NAME` from the checkout (installed or not)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
