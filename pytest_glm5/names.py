"""Keys that become file and directory names: one check wherever the key comes from (an option, a profile's
`name`, what a server reports in `/server_info`), so that none of them places a baselines, answers, history or
lease file outside its directory.

    >>> key("8x-rtx-pro-6000-blackwell-sm120", "--glm5-hardware")
    '8x-rtx-pro-6000-blackwell-sm120'
    >>> key("sim-../../etc-x1", "the hardware key")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: the hardware key 'sim-../../etc-x1' is not a key: use letters, digits and . _ + - ...
"""

from __future__ import annotations

import re

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


def is_key(value: str) -> bool:
    """Whether `value` is one directory name of letters, digits and . _ + - (never `..`, never a path)."""
    return bool(_KEY.match(value)) and ".." not in value


def key(value: str, what: str) -> str:
    """`value` if it is a key, else ValueError naming `what` and the rule."""
    if not is_key(value):
        raise ValueError(f"{what} {value!r} is not a key: use letters, digits and . _ + - (one directory name, no "
                         "'..')")
    return value
