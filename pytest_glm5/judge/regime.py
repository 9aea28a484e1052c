"""Did the GPUs run the reference's power regime? A GPU at its power cap under full load is normal, so the cap
share and the enforced limit are recorded with the reference (the verdict's provenance, telemetry/energy.py's
numbers) and only named where they changed, as the likely cause of a change in speed or tok/J:

    >>> power_change({"limit_w": 600.0, "cap_share": 0.4}, {"limit_w": 450.0, "cap_share": 0.97})
    'the enforced power limit changed (600 W to 450 W a GPU)'
    >>> power_change({"limit_w": 600.0, "cap_share": 0.4}, {"limit_w": 600.0, "cap_share": 0.97})
    'GPUs at their power cap 97% of the window, 40% in the reference'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LIMIT_CHANGE = 0.02  # an enforced limit that moved more than this is a changed setting, not a reading's jitter
CAP_SHARE_CHANGE = 0.2  # 20 points more (or less) of the window at the power cap: the GPUs ran another regime


def power_change(reference: Mapping[str, Any] | None, today: Mapping[str, Any] | None) -> str | None:
    """The likely cause of a change in speed or tok/J, where the GPUs' power regime moved since the reference: the
    enforced limit, or the share of the window at the power cap; None when neither moved (or either is unknown)."""
    if not reference or not today:
        return None
    was, now = reference.get("limit_w"), today.get("limit_w")
    if was and now and abs(now / was - 1) > LIMIT_CHANGE:
        return f"the enforced power limit changed ({was:.0f} W to {now:.0f} W a GPU)"
    was, now = reference.get("cap_share"), today.get("cap_share")
    if was is not None and now is not None and abs(now - was) > CAP_SHARE_CHANGE:
        return f"GPUs at their power cap {now * 100:.0f}% of the window, {was * 100:.0f}% in the reference"
    return None
