"""The lexer of the launch-script reader: bash text -> words (with their quoting) and operators.

A :class:`Word` is a list of parts ``(kind, text, quoted)`` with kind ``lit`` (literal text), ``var``
(``$NAME``, ``${...}``, ``$1``), ``arith`` (``$(( ... ))``) or ``cmd`` (``$( ... )`` and backticks, never
run). ``NAME=( ... )`` is one word holding the array's element words. Each word keeps its source span
(``at``) and each literal the spans of its characters (:class:`~.placed.Placed`), so an edit can be made where the
user wrote it.
Comments, line continuations and redirections (with their targets) are dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .placed import Placed, Span, read_at

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?=)")


class ScriptError(ValueError):
    """A script line the reader cannot interpret; the message names the line and the fix."""

    def __init__(self, line: int, message: str, *, path: str = "") -> None:
        self.line = line
        where = f"{path}:" if path else "line "
        super().__init__(f"{where}{line}: {message}")


# --------------------------------------------------------------------------- lexer
# A word is a list of parts: (kind, text, quoted); kind in lit | var | arith | cmd.
Part = tuple[str, str, bool]


@dataclass
class Word:
    parts: list[Part]
    line: int
    array: list["Word"] | None = None  # NAME=( ... ): the elements
    raw: str = ""
    at: Span | None = None  # where the word is written (None: a word the lexer was not told the file of)

    def literal(self) -> str | None:
        """The word's text when it has no expansions (quotes removed), else None."""
        if any(k != "lit" for k, _, _ in self.parts):
            return None
        return "".join(t for _, t, _ in self.parts)

    def is_unquoted_literal(self, text: str) -> bool:
        return len(self.parts) == 1 and self.parts[0] == ("lit", text, False)


@dataclass
class Tok:
    kind: str  # word | op | nl
    value: object
    line: int


def _find_close(text: str, i: int, open_: str, close: str) -> int:
    """Index of the ``close`` matching an already-consumed ``open_`` (quotes respected)."""
    depth = 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            j = text.find("'", i + 1)
            i = (j if j >= 0 else n) + 1
            continue
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if text.startswith(open_, i):
            depth += 1
            i += len(open_)
            continue
        if text.startswith(close, i):
            depth -= 1
            if depth == 0:
                return i
            i += len(close)
            continue
        i += 1
    return -1


class _Lexer:
    """``base``: where ``text`` stands in the file ``path``: its offset, or the :class:`~.placed.Placed` word it
    was read as (a ``bash -c`` string's), None when it is not in a file; literals and words are then placed at
    their spans. ``inner``: the text sits inside quotes or a ``${...}`` of the file (a value written there must
    need no quoting)."""

    def __init__(self, text: str, path: str = "", base: int | Placed | None = None, inner: bool = False) -> None:
        self.t = text
        self.i = 0
        self.n = len(text)
        self.path = path
        self.line = 1
        self.base = base
        self.inner = inner

    def _pos(self, p: int) -> int | None:
        """The file offset of this text's ``p``-th character (None: not written in the file as it is)."""
        if self.base is None or isinstance(self.base, int):
            return None if self.base is None else self.base + p
        for o, sp in self.base.segs:
            if o <= p < o + sp.end - sp.start:
                return sp.start + p - o
        return None

    def _lit(self, text: str, positions: list[int] | range, quoted: bool) -> str:
        """``text`` whose characters were read at ``positions`` of this text, placed in the file."""
        if self.base is None:
            return text
        return read_at(text, self.path, [self._pos(p) for p in positions], quoted=quoted or self.inner)

    def _span(self, start: int) -> Span | None:
        a, b = self._pos(start), self._pos(self.i - 1)
        if a is None or b is None or b - a != self.i - 1 - start:
            return None
        return Span(self.path, a, b + 1, self.inner)

    def err(self, msg: str, line: int | None = None) -> ScriptError:
        return ScriptError(line or self.line, msg, path=self.path)

    def _adv(self, k: int = 1) -> None:
        self.line += self.t.count("\n", self.i, self.i + k)
        self.i += k

    def _dollar(self, quoted: bool) -> Part:
        t, i = self.t, self.i  # t[i] == "$"
        start_line = self.line
        if t.startswith("$((", i):
            j = _find_close(t, i + 3, "((", "))")
            if j < 0:
                raise self.err("unclosed $(( ... )); close the arithmetic expansion", start_line)
            part = ("arith", t[i + 3:j], quoted)
            self._adv(j + 2 - i)
            return part
        if t.startswith("$(", i):
            j = _find_close(t, i + 2, "(", ")")
            if j < 0:
                raise self.err("unclosed $( ... ); close the command substitution", start_line)
            part = ("cmd", t[i:j + 1], quoted)
            self._adv(j + 1 - i)
            return part
        if t.startswith("${", i):
            j = _find_close(t, i + 2, "{", "}")
            if j < 0:
                raise self.err("unclosed ${ ... }; close the parameter expansion", start_line)
            part = ("var", self._lit(t[i + 2:j], range(i + 2, j), True), quoted)
            self._adv(j + 1 - i)
            return part
        m = _NAME.match(t, i + 1)
        if m:
            self._adv(m.end() - i)
            return ("var", m.group(0), quoted)
        if i + 1 < self.n and (t[i + 1].isdigit() or t[i + 1] in "@*#?$!"):
            self._adv(2)
            return ("var", t[i + 1], quoted)
        self._adv(1)
        return ("lit", "$", quoted)

    def _word(self) -> Word:
        """Read one word at self.i (not whitespace / operator)."""
        parts: list[Part] = []
        line = self.line
        start = self.i
        buf: list[str] = []
        at: list[int] = []  # where each character of buf was read

        def flush(quoted: bool = False) -> None:
            if buf:
                parts.append(("lit", self._lit("".join(buf), at, quoted), quoted))
                buf.clear()
                at.clear()

        t = self.t
        while self.i < self.n:
            c = t[self.i]
            if c in " \t\n;&|<>()":
                # NAME=( ... ) or NAME+=( ... ): a bash array
                if c == "(" and not parts and buf and _ASSIGN.match("".join(buf)) and "".join(buf).endswith("="):
                    name_part = "".join(buf)
                    buf.clear()
                    self._adv(1)
                    elems = self._array(line)
                    w = Word([("lit", self._lit(name_part, list(at), False), False)], line, array=elems)
                    w.raw, w.at = t[start:self.i], self._span(start)
                    return w
                break
            if c == "\\":
                if self.i + 1 < self.n and t[self.i + 1] == "\n":
                    self._adv(2)  # line continuation
                    continue
                flush()
                if self.i + 1 < self.n:
                    parts.append(("lit", self._lit(t[self.i + 1], [self.i + 1], True), True))
                self._adv(2)
                continue
            if c == "'":
                j = t.find("'", self.i + 1)
                if j < 0:
                    raise self.err("unclosed single quote; close it on the same logical line", line)
                flush()
                parts.append(("lit", self._lit(t[self.i + 1:j], range(self.i + 1, j), True), True))
                self._adv(j + 1 - self.i)
                continue
            if c == '"':
                flush()
                self._adv(1)
                self._dquote(parts, line)
                continue
            if c == "$":
                flush()
                parts.append(self._dollar(False))
                continue
            if c == "`":
                j = t.find("`", self.i + 1)
                if j < 0:
                    raise self.err("unclosed backtick; close the command substitution", line)
                flush()
                parts.append(("cmd", t[self.i:j + 1], False))
                self._adv(j + 1 - self.i)
                continue
            at.append(self.i)
            buf.append(c)
            self._adv(1)
        flush()
        w = Word(parts, line)
        w.raw, w.at = t[start:self.i], self._span(start)
        return w

    def _dquote(self, parts: list[Part], line: int) -> None:
        t = self.t
        buf: list[str] = []
        n_before = len(parts)
        at: list[int] = []  # where each character of buf was read

        def lit() -> str:
            out = self._lit("".join(buf), list(at), True)
            at.clear()
            return out

        while True:
            if self.i >= self.n:
                raise self.err("unclosed double quote; close it", line)
            c = t[self.i]
            if c == '"':
                self._adv(1)
                break
            if c == "\\" and self.i + 1 < self.n:
                nxt = t[self.i + 1]
                if nxt == "\n":
                    self._adv(2)
                    continue
                if nxt in '"\\$`':
                    at.append(self.i + 1)
                    buf.append(nxt)
                    self._adv(2)
                    continue
                at.append(self.i)
                buf.append(c)
                self._adv(1)
                continue
            if c == "$" or c == "`":
                if buf:
                    parts.append(("lit", lit(), True))
                    buf.clear()
                if c == "$":
                    parts.append(self._dollar(True))
                else:
                    j = t.find("`", self.i + 1)
                    if j < 0:
                        raise self.err("unclosed backtick", line)
                    parts.append(("cmd", t[self.i:j + 1], True))
                    self._adv(j + 1 - self.i)
                continue
            at.append(self.i)
            buf.append(c)
            self._adv(1)
        # "" is an empty word, not nothing ("$@" with no arguments is nothing)
        if buf or len(parts) == n_before:
            parts.append(("lit", lit(), True))

    def _skip_blank(self, newlines: bool) -> None:
        t = self.t
        while self.i < self.n:
            c = t[self.i]
            if c in " \t" or (newlines and c == "\n"):
                self._adv(1)
            elif c == "\\" and self.i + 1 < self.n and t[self.i + 1] == "\n":
                self._adv(2)
            elif c == "#":
                j = t.find("\n", self.i)
                self._adv((j if j >= 0 else self.n) - self.i)
            else:
                break

    def _array(self, line: int) -> list[Word]:
        elems: list[Word] = []
        while True:
            self._skip_blank(newlines=True)
            if self.i >= self.n:
                raise self.err("array opened with ( is never closed with )", line)
            if self.t[self.i] == ")":
                self._adv(1)
                return elems
            w = self._word()
            if not w.parts:
                raise self.err(f"unexpected {self.t[self.i]!r} inside an array", self.line)
            elems.append(w)

    def tokens(self) -> list[Tok]:
        out: list[Tok] = []
        t = self.t
        while True:
            self._skip_blank(newlines=False)
            if self.i >= self.n:
                break
            c = t[self.i]
            line = self.line
            if c == "\n":
                out.append(Tok("nl", "\n", line))
                self._adv(1)
                continue
            two = t[self.i:self.i + 2]
            if two in ("&&", "||", ";;"):
                out.append(Tok("op", two, line))
                self._adv(2)
                continue
            if two == "&>" or c in "<>":
                # redirection: drop it and its target
                if two in ("&>", ">>", ">&", "<<"):
                    self._adv(2)
                else:
                    self._adv(1)
                if t[self.i:self.i + 1] in (">", "&"):
                    self._adv(1)
                self._skip_blank(newlines=False)
                if self.i < self.n and t[self.i] not in "\n;&|":
                    self._word()
                continue
            if c in ";&|":
                out.append(Tok("op", c, line))
                self._adv(1)
                continue
            if c in "()":
                out.append(Tok("op", c, line))
                self._adv(1)
                continue
            w = self._word()
            # "2>&1": a word of digits right before a redirection is its file descriptor
            if self.i < self.n and t[self.i] in "<>" and (w.literal() or "").isdigit():
                continue
            out.append(Tok("word", w, line))
        return out
