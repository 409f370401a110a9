"""Keeps Hypothesis out of the broker process; imported first by `coordinator.__main__`.

kio registers Hypothesis strategies for its types whenever Hypothesis can be imported, and
development environments have it (a test dependency). The broker never generates test data,
yet the import costs about 10 MB of resident memory and 0.15 s of start-up. Marking the module
as absent makes kio take its "not installed" path, as it does in the production image. A
process that has already imported Hypothesis (a test run) keeps it.
"""

from __future__ import annotations

import sys

if "hypothesis" not in sys.modules:
    sys.modules["hypothesis"] = None  # type: ignore[assignment]
