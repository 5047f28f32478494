"""The tokens of an AIP-160 filter (the grammar: ``filters.py``): parentheses, commas,
comparators, NOT/AND/OR, members (segments joined by "."), values (quoted or bare), each with
the column it starts at, for error messages.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

from dataclasses import dataclass


class FilterError(ValueError):
    """A filter string could not be parsed; the message names the column."""


KEYWORDS = ("AND", "OR", "NOT")
_OPERATORS = ("<=", ">=", "!=", "=", "<", ">", ":")  # longest first
_QUOTES = "\"'"
_MEMBER_STOP = set("()\"'=!<>:.,") | {"~"}  # ends a bare segment of a field name
_VALUE_STOP = set("()\"'")  # ends a bare value (which may hold ':' and '.', as timestamps do)


@dataclass(frozen=True)
class Token:
    kind: str  # "(", ")", ",", "OP", "NOT", "AND", "OR", "MEMBER", "VALUE", "EOF"
    text: str  # the value (unescaped); a MEMBER's segments joined by "."
    col: int  # 1-based column of the token's first character
    segments: tuple[str, ...] = ()  # a MEMBER's segments
    quoted: bool = False
    end: int = 0  # 1-based column just after the token

    def describe(self) -> str:
        if self.kind == "EOF":
            return "end of input"
        if self.quoted and self.kind in ("VALUE", "MEMBER"):
            return f'string "{self.text}"'
        return f"token '{self.text}'"


def _quoted(text: str, i: int) -> tuple[str, int]:
    """The quoted string starting at ``text[i]`` (either quote style) unescaped, and the index after it."""
    quote, start, i, buf, n = text[i], i, i + 1, [], len(text)
    while i < n and text[i] != quote:
        if text[i] == "\\" and i + 1 < n:
            i += 1
        buf.append(text[i])
        i += 1
    if i >= n:
        raise FilterError(f"filter: unterminated string starting at column {start + 1}")
    return "".join(buf), i + 1


def tokenize(text: str) -> list[Token]:
    toks: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        after_op = bool(toks) and toks[-1].kind == "OP"
        if c.isspace():
            i += 1
        elif c in "(),":
            toks.append(Token(c, c, i + 1, end=i + 2))
            i += 1
        elif op := next((o for o in _OPERATORS if text.startswith(o, i)), None):
            toks.append(Token("OP", op, i + 1, end=i + 1 + len(op)))
            i += len(op)
        elif after_op:  # a value: quoted, or bare up to a space (a bare timestamp keeps its ':')
            start = i
            if c in _QUOTES:
                value, i = _quoted(text, i)
                toks.append(Token("VALUE", value, start + 1, quoted=True, end=i + 1))
                continue
            while i < n and not text[i].isspace() and text[i] not in _VALUE_STOP:
                i += 1
            toks.append(Token("VALUE", text[start:i], start + 1, end=i + 1))
        elif c == "-":  # AIP-160: "-a" is "NOT a" (a value's leading '-' was read above)
            toks.append(Token("NOT", "-", i + 1, end=i + 2))
            i += 1
        else:  # a member: segments (bare or quoted) joined by '.'
            start, segments, quoted = i, [], False
            while True:
                if i < n and text[i] in _QUOTES:
                    segment, i = _quoted(text, i)
                    quoted = True
                else:
                    seg_start = i
                    while i < n and not text[i].isspace() and text[i] not in _MEMBER_STOP:
                        i += 1
                    segment = text[seg_start:i]
                    if not segment and not segments:
                        raise FilterError(f"filter: unexpected character {text[i]!r} at column {i + 1}")
                segments.append(segment)
                if i < n and text[i] == ".":
                    i += 1
                    continue
                break
            joined = ".".join(segments)
            kind = joined if not quoted and len(segments) == 1 and joined in KEYWORDS else "MEMBER"
            toks.append(Token(kind, joined, start + 1, tuple(segments), quoted, end=i + 1))
    toks.append(Token("EOF", "", n + 1, end=n + 1))
    return toks
