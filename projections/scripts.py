"""Words in every script: character classes shared by the text index and name matching.

Python's `\\w` leaves out combining marks, so "हिन्दी" (Devanagari vowel signs and a virama) or
"Zoë" typed as e + U+0308 fell apart into letters. Patterns that need the marks are written with
`{marks}` where the class of them goes, and compiled by `pattern` on first use: building the
class scans the Unicode database (about 0.02 s) and compiling it takes as long again, which
every command would otherwise pay at start-up.
"""

from __future__ import annotations

import functools
import re
import unicodedata

#: Scripts written without spaces between words (Thai, kana, CJK ideographs) and Hangul, whose
#: particles attach to the noun (서울에서): for a regex class, in Python's and Tantivy's regexes.
UNSPACED = "\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"


@functools.cache
def marks() -> str:
    """A regex class body of every combining mark (category M) this Python's Unicode knows."""
    runs: list[tuple[int, int]] = []
    for span in (range(0x300, 0x20000), range(0xE0100, 0xE01F0)):
        for c in span:
            if unicodedata.category(chr(c))[0] == "M":
                if runs and runs[-1][1] == c - 1:
                    runs[-1] = (runs[-1][0], c)
                else:
                    runs.append((c, c))
    return "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in runs)


@functools.cache
def pattern(template: str) -> re.Pattern[str]:
    """`template` compiled, with the class of combining marks where it says `{marks}`."""
    return re.compile(template.replace("{marks}", marks()))
