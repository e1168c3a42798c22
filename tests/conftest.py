"""Hypothesis profiles, chosen by the HYPOTHESIS_PROFILE environment variable.

- `default` (unset): hypothesis's own settings, a fresh random seed each run, so every run of the
  suite explores new cases.
- `ci` (`.ci/run` sets it): the same number of examples, derandomized (each test's seed follows
  from its source), so whether main passes depends on main's code, not on the draw; a case found
  by exploration becomes a narrative test.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
