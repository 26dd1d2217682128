"""Did you mean …?: the one place a misspelt name is matched to the names it may have meant.

A PLANQ_* variable and a run's `--arg` key are both looked up by name, and a typo in either is
otherwise silently ignored; both ask here, so both suggest alike.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: How close (difflib's ratio) an unknown name must be to a known one to be taken for its
#: misspelling: JOB_TIMOUT for JOB_TIMEOUT, not WORKER_QUEUES (compose's own knob) or TEST_*.
TYPO_CUTOFF = 0.75


def closest(name: str, known: Iterable[str], cutoff: float = TYPO_CUTOFF) -> str | None:
    """The known name name most likely misspells, or None when none is close enough."""
    found = difflib.get_close_matches(name, list(known), n=1, cutoff=cutoff)
    return found[0] if found else None
