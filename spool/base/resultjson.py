"""The one rule for a result's JSON, wherever a result is made or taken.

A result is stored as ASCII JSON (``json.dumps``' default escaping) and must be plain JSON that is
also Unicode text: no NaN or Infinity (``allow_nan=False``), and no lone UTF-16 surrogate such as
``"\\ud800"``. Python spells a lone surrogate as a valid-looking ``\\ud800`` escape, but it is no
character: the job's result, status and dashboard page could never be sent as UTF-8 again (the
API refuses such a body with 400 for that reason). The attempt child checks a handler's value
with this rule, so a local and a remote worker fail such a value alike, in one try, with the same
words; the server checks a remote worker's result with it again.
"""

from __future__ import annotations

import json

NOT_JSON = "result is not JSON-serialisable: "  # the prefix of every refusal's message


class ResultNotJSON(ValueError):
    """The value can't be a result; the message says why (``NOT_JSON`` + the reason)."""


def encode_result(value: object) -> str:
    """``value`` as the ASCII JSON text a result is stored as, or ResultNotJSON."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ResultNotJSON(f"{NOT_JSON}{exc}") from None
    if "\\ud" in text:  # cheap: only text with a surrogate escape is looked at again
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            lone = exc.object[exc.start : exc.end].encode("unicode_escape").decode()
            raise ResultNotJSON(
                f"{NOT_JSON}a string holds a lone surrogate {lone}, which is not Unicode text"
            ) from None
    return text
