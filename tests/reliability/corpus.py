"""A generated corpus of hostile names and paths (deterministic: same list every run).

Each entry is a value a client might send as a name (or a path) and a label saying
which family it comes from, so a failure names the family. The values are built
from families x decorations, plus seeded random mixtures, to well over 1,000
entries. Whether each one is valid is not written here: the reference model's
validation (``model.check_name`` / ``model.split``) decides, independently of the
coordinator, and the test checks the coordinator agrees.
"""

from __future__ import annotations

import random
import unicodedata
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    family: str
    value: str | bytes | object


CONTROL = [chr(c) for c in range(0x00, 0x20)] + [chr(0x7F)] + [chr(c) for c in range(0x80, 0xA0)]

SQL_JSON = [
    "'; DROP TABLE nodes; --",
    "' OR '1'='1",
    "Robert'); DELETE FROM events;--",
    "\\",
    "\\\\",
    '"',
    '""',
    "{}",
    "[]",
    '{"a": 1}',
    "\\u0000",
    "\\x00",
    "$1",
    "%s",
    "%(x)s",
    ":ns",
    "?",
    "E'\\\\'",
    "$$",
    "/*",
    "*/",
    "--",
    ";",
    "`",
    "null",
    "true",
]

ES_QUERY = [
    "path:*",
    "a OR b",
    "a AND NOT b",
    "\\*",
    "*",
    "?",
    "name:/.*/",
    "(a",
    "a)",
    "[a TO z]",
    "{a TO z}",
    "a~2",
    "a^5",
    '"a b"',
    "+a -b",
    "a && b || c",
    "!a",
    "_id",
    "_source",
    "_all",
    "<script>",
    "<img src=x onerror=alert(1)>",
    "${jndi:ldap://x}",
    "{{7*7}}",
    "#{7*7}",
]

LOOKALIKES = [
    "a",
    "\u0430",  # Cyrillic a
    "e",
    "\u0435",  # Cyrillic ie
    "o",
    "\u03bf",  # Greek omicron
    "paypal",
    "p\u0430yp\u0430l",
    "I",
    "l",
    "\u0399",  # Greek Iota
    "\u2024",  # one dot leader (looks like '.')
    "\u2025",
    "\u2215",  # division slash (looks like '/')
    "\u2044",  # fraction slash
    "\uff0f",  # fullwidth solidus
    "\uff0e",  # fullwidth full stop
    "\uff0e\uff0e",
    "\u00b7",
]

INVISIBLE = [
    "\u200b",  # zero width space
    "\u200c",  # ZWNJ
    "\u200d",  # ZWJ
    "\u2060",  # word joiner
    "\ufeff",  # BOM
    "\u200e",  # LRM
    "\u200f",  # RLM
    "\u202a",  # LRE
    "\u202e",  # RLO
    "\u2066",  # LRI
    "\u2069",  # PDI
    "\u061c",  # Arabic letter mark
    "\u00ad",  # soft hyphen
    "\u034f",  # combining grapheme joiner
    "\u2028",  # line separator
    "\u2029",  # paragraph separator
    "\u3000",  # ideographic space
    "\u00a0",  # no-break space (C1 range ends at 0x9F: allowed)
    " ",
    "  ",
    "\ufffd",
    "\ufffe",
    "\uffff",
    "\U0010ffff",
]

EMOJI = [
    "\U0001f600",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",  # family (ZWJ sequence)
    "\U0001f1eb\U0001f1f7",  # flag
    "\U0001f44d\U0001f3fd",  # skin tone
    "\u2764\ufe0f",
    "\U0001f3f3\ufe0f\u200d\U0001f308",
]

NORMALIZATION = [
    "\u00e9",
    "e\u0301",
    "\u00c5",
    "A\u030a",
    "\u212b",  # Angstrom sign: NFC is U+00C5
    "\u1e9b\u0323",
    "\ufb01",  # fi ligature: NFC keeps it (NFKC would not)
    "\u0958",  # composition exclusion: NFC decomposes it
    "\uac00",
    "\u1100\u1161",  # Hangul jamo: NFC composes to U+AC00
    "\u0041\u0300\u0301",
    "\u2126",  # Ohm sign -> Greek Omega
]

SURROGATES = ["\ud800", "\udfff", "a\udc80b", "\ud83d", "\ud83d\ude00"]

BAD_UTF8 = [
    b"\xff",
    b"\xc0\xaf",  # overlong '/'
    b"\xc0\x80",  # overlong NUL
    b"\xed\xa0\x80",  # encoded surrogate
    b"a\x80b",
    b"\xe2\x82",  # truncated
    b"\xf4\x90\x80\x80",  # above U+10FFFF
]

NOT_TEXT: list[object] = [None, 0, 1.5, ["a"], {"a": 1}, ("a",), object()]


def _boundaries() -> list[Entry]:
    """Names around the 255-byte limit in 1-, 2-, 3- and 4-byte characters, and NFD
    spellings whose NFC form is shorter (the limit applies to the NFC form)."""
    out: list[Entry] = []
    for ch in ["a", "\u00e9", "\u20ac", "\U0001f600"]:
        size = len(ch.encode())
        fit = 255 // size
        for n in (fit - 1, fit, fit + 1):
            out.append(Entry(f"len{size}x{n}", ch * n))
        pad = 255 - fit * size
        out.append(Entry(f"len{size}-exact", ch * fit + "a" * pad))
        out.append(Entry(f"len{size}-over", ch * fit + "a" * (pad + 1)))
    for n in (85, 86, 100, 127, 128):
        out.append(Entry(f"nfd-e-acute-x{n}", "e\u0301" * n))  # NFD 3n bytes, NFC 2n
    out.append(Entry("nfc-grows", "\u0958" * 85))  # 255 bytes, NFC 510
    out.append(Entry("long-1000", "x" * 1000))
    out.append(Entry("long-100k", "y" * 100_000))
    return out


def names() -> list[Entry]:
    """At least 1,000 hostile names (values for a single path component)."""
    out: list[Entry] = []
    for c in CONTROL:
        out += [Entry("control", c), Entry("control-mid", f"a{c}b"), Entry("control-end", f"a{c}")]
    for fam, values in [
        ("sql-json", SQL_JSON), ("es-query", ES_QUERY), ("lookalike", LOOKALIKES),
        ("invisible", INVISIBLE), ("emoji", EMOJI), ("normalization", NORMALIZATION),
        ("surrogate", SURROGATES),
    ]:
        for v in values:
            out += [Entry(fam, v), Entry(f"{fam}-wrapped", f"x{v}y"), Entry(f"{fam}-x2", v * 2)]
    out += [Entry("dots", v) for v in [".", "..", "...", ". ", " .", "./", "../", ".a", "a."]]
    out += [Entry("slash", v) for v in ["/", "a/b", "/a", "a/", "//", "a\\b"]]
    out += [Entry("empty", "")]
    out += [Entry("bad-utf8", v) for v in BAD_UTF8]
    out += [Entry("utf8-bytes", v.encode()) for v in ["bytes-ok", "\u00e9t\u00e9", "a/b"]]
    out += [Entry("not-text", v) for v in NOT_TEXT]
    out += _boundaries()
    # Seeded random mixtures of everything above, to reach combinations no list has.
    rng = random.Random(7)
    alphabet = [
        "a", "b", "Z", "0", "-", "_", ".", " ", "\ud800", *CONTROL[:4], *SQL_JSON[:6],
        *ES_QUERY[:6], *LOOKALIKES, *INVISIBLE, *EMOJI, *NORMALIZATION,
    ]
    while len(out) < 1100:
        n = rng.randint(1, 12)
        out.append(Entry("random-mix", "".join(rng.choice(alphabet) for _ in range(n))))
    return out


def paths(max_depth: int) -> list[Entry]:
    """Hostile whole paths (mkdir -p / stat targets), relative to a test directory ``/p``."""
    out: list[Entry] = [
        Entry("path", v)
        for v in [
            "", "/", "//", "/p//a", "/p/a/", "p/a", "./p", "/p/./a", "/p/../a", "/p/a/..",
            "/p/\x00", "/p/a\x00b/c", "/p/\u00e9/e\u0301", "/p/" + "a" * 256, "\\p\\a",
            "/p/" + "/".join(["d"] * (max_depth - 1)),  # exactly max_depth components
            "/p/" + "/".join(["d"] * max_depth),  # one too deep
            "/p/" + "/".join(["d"] * (max_depth * 4)),
            "/p/" + "/".join(["n" * 255] * 16) + "/x",  # over 4,096 bytes
            "/p/" + "/".join(["e\u0301" * 80] * 17),  # over 4,096 bytes as NFD, under as NFC
        ]
    ]
    out += [Entry("path-bytes", b"/p/\xff"), Entry("path-bytes", "/p/b\u00e9".encode())]
    out += [Entry("path-not-text", v) for v in NOT_TEXT]
    return out


def nfc(value: str) -> str:
    return unicodedata.normalize("NFC", value)
