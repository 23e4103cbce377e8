"""Where a word of a launch was read: a string that remembers the spans of the files its text was written in.

The launch-script reader (:mod:`.bash_lex`, :mod:`.bash_eval`, :mod:`.chain`) hands back each word of the launch
command as a :class:`Placed` where its text was written as it is: a literal, a variable's assigned value, a
``${X:-default}``, an element of an array or of an option string (continued over lines), an argument the calling
script passes on, an ``env K=V`` value. Each piece of the text that stands in a file knows the file, the span
``[start, end)`` (character offsets), whether it sits inside quotes (or a ``${...}``) and the variable it was assigned
to. A word that a variable expansion gave (``$TP``, ``"${TP}"``) also remembers that word (``site``): a value that
cannot be changed where it was assigned (a computed one, one that other words read too) is changed there. An edit
of the launch (:mod:`infrarsi.apply.launch_edit`) changes each knob at the span it was read from.

A Placed is a ``str``: everything else reads it as the text it is (a copy or a pickle is the plain text).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Span:
    """``[start, end)`` of the file ``path``; ``quoted``: inside the user's quotes or a ``${...}`` (a new value there
    must need no quoting); ``var``: the variable whose assignment gave it ("" for none)."""

    path: str
    start: int
    end: int
    quoted: bool = False
    var: str = ""


Segs = tuple[tuple[int, Span], ...]  # (offset in the text, the span its characters were read from)


class Placed(str):
    """A string with the spans its pieces were read from (``segs``) and the ``$VAR`` word that gave it (``site``)."""

    segs: Segs
    site: Span | None

    def __new__(cls, text: str, segs: Segs = (), site: Span | None = None) -> Placed:
        out = super().__new__(cls, text)
        out.segs, out.site = segs, site
        return out

    @property
    def at(self) -> Span | None:
        """The one span the whole text was read from; None when it is pieces (or none) of the files."""
        if len(self.segs) == 1 and self.segs[0][0] == 0 and self.segs[0][1].end - self.segs[0][1].start == len(self):
            return self.segs[0][1]
        return None

    def __reduce__(self):
        return (str, (str(self),))


def at_of(word: str) -> Span | None:
    return word.at if isinstance(word, Placed) else None


def site_of(word: str) -> Span | None:
    return word.site if isinstance(word, Placed) else None


def _segs(word: str) -> Segs:
    return word.segs if isinstance(word, Placed) else ()


def read_at(text: str, path: str, positions: Iterable[int | None], *, quoted: bool = False) -> str:
    """``text`` whose k-th character was read at ``positions[k]`` of ``path`` (None: not written there as it is),
    as a :class:`Placed`."""
    segs: list[tuple[int, Span]] = []
    prev: int | None = None
    for k, p in enumerate(positions):
        if p is None:
            prev = None
            continue
        if segs and prev is not None and segs[-1][1].end == p:
            o, s = segs[-1]
            segs[-1] = (o, replace(s, end=p + 1))
        else:
            segs.append((k, Span(path, p, p + 1, quoted)))
        prev = p
    return Placed(text, tuple(segs)) if segs else text


def part_of(word: str, offset: int, length: int) -> str:
    """``word[offset:offset + length]``, with the spans of its characters."""
    text = str.__getitem__(word, slice(offset, offset + length))
    segs = []
    for o, s in _segs(word):
        a, b = max(o, offset), min(o + s.end - s.start, offset + length)
        if a < b:
            segs.append((a - offset, replace(s, start=s.start + a - o, end=s.start + b - o)))
    return Placed(text, tuple(segs)) if segs else text


def split_placed(value: str) -> list[str]:
    """``value.split()``, each piece with its spans."""
    if not _segs(value):
        return value.split()
    out, i, n = [], 0, len(value)
    while i < n:
        while i < n and value[i].isspace():
            i += 1
        j = i
        while j < n and not value[j].isspace():
            j += 1
        if j > i:
            out.append(part_of(value, i, j - i))
        i = j
    return out


def joined(pieces: list[str]) -> str:
    """The pieces of one word joined, with their spans (a piece read where the others were keeps its object)."""
    kept = [p for p in pieces if p != ""] or pieces[:1]
    if len(kept) == 1:
        return kept[0]
    segs: list[tuple[int, Span]] = []
    off = 0
    for p in kept:
        for o, s in _segs(p):
            last = segs[-1][1] if segs else None
            if (last is not None and segs[-1][0] + last.end - last.start == off + o and last.path == s.path
                    and last.end == s.start and (last.quoted, last.var) == (s.quoted, s.var)):
                segs[-1] = (segs[-1][0], replace(last, end=s.end))
            else:
                segs.append((off + o, s))
        off += len(p)
    text = "".join(kept)
    return Placed(text, tuple(segs)) if segs else text


def assigned(value: str, var: str) -> str:
    """``value`` as the value a ``var=...`` assignment gives (an edit writes it unquoted, naming ``var``)."""
    if not _segs(value):
        return value
    return Placed(str(value), tuple((o, replace(s, var=var)) for o, s in _segs(value)), site_of(value))


def with_site(value: str, site: Span | None) -> str:
    """``value`` (a variable's value) as the word ``$VAR`` at ``site`` gave it."""
    if site is None:
        return value
    return Placed(str(value), _segs(value), site)
