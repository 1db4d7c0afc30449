"""Text from a submission, made safe to write: no lone surrogates, no undecodable bytes."""

from __future__ import annotations

import re

SURROGATE = re.compile("[\ud800-\udfff]")     # a str from JSON holds these only alone (pairs are joined)


def clean(value):
    """``value`` (str, or lists/dicts of them) with every string encodable as UTF-8 (U+FFFD for the rest)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    return value
