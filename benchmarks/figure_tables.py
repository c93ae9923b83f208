"""Tables of the docs built wholly from one results file, for ``<!--table NAME-->`` blocks.

Each public function takes the results (``results[stem]`` is ``benchmarks/results/STEM.json``
read) and returns the block's markdown; ``figures.py --check`` fails when a page's block
differs from what its function renders now, and ``--write`` (``make figures``) replaces it.
"""

from __future__ import annotations
