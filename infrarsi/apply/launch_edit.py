"""The tuned setting as a minimal edit of the user's own launch file: the .sh, the TOML job file, the 0.3 command line.

A training team reviews a five-line diff of the script they already run; nobody reviews a regenerated
one. So ``apply`` changes the files the contract's launch is read from, at the place the reader read each
knob (every word of the launch carries the spans it was read from, :mod:`infrarsi.launch.placed`):

- a knob flag's value where it was read: ``--tensor-model-parallel-size 8`` -> ``4`` on its line, or, when
  the flag takes a variable (``--tensor-model-parallel-size ${TP}``), the variable's assignment that gave the
  value (``TP=8`` -> ``TP=4``, ``TP=${TP:-8}`` -> ``TP=${TP:-4}``, an ``export TP=8`` in the sbatch file, the
  argument a calling script passes as ``$1`` or through ``"$@"``), inside arrays and option strings alike; a
  value no assignment gives as it is (``TP=$(( GPUS / 2 ))``) or that other words read too is changed at the
  ``$TP`` word;
- a flag the new setting drops (``--overlap-param-gather``) is deleted where it was read, with its line when it
  stood alone;
- a flag the setting adds is written at the end of the command the chain ends in (before ``"$@"``, a redirection
  or the word the framework keeps last, ``last``: torchtitan 0.3's ``activation-checkpoint:`` choice), or at the
  end of the command that runs its script when the launch passes its script's arguments on (``"$@"``);
- an environment knob (``NCCL_ALGO``) is changed where its value was assigned, or a new ``export`` line is added
  before the launch;
- a TOML job file gets the changed fields (:mod:`infrarsi.launch.toml_edit`).

Comments, layout, variables and every other byte stay. The edited files are read back once with the project's
own script reader: they must give exactly the tuned launch (the same one the trials ran) and the same workload,
else the edit is refused with the reason (:class:`EditError`) and nothing is written.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..contract.model import ENV_NAME
from ..launch.placed import Placed, Span, at_of, part_of, site_of
from ..launch.toml_edit import TomlEditError, set_values

if TYPE_CHECKING:
    from ..adapters.base import LaunchFileAdapter
    from ..contract.model import Contract

# A script "reading": program arguments and environment of its launch command, and the setting and workload.
Reading = tuple[list[str], dict[str, str], dict[str, Any], dict[str, Any]]
Texts = dict[str, str]  # the files of a launch chain, path -> text, outermost first


class EditError(ValueError):
    """The change cannot be written as a minimal edit of the user's file (the reason, one line)."""


@dataclass(frozen=True)
class Edit:
    text: str  # the edited file
    changed_lines: int


@dataclass(frozen=True)
class _Item:
    flag: str  # "--name", a word kept last, or "" for a word that belongs to no flag
    values: list[str]
    words: list[str]  # the words read, as the reader placed them


def _items(args: list[str], last: str = "") -> list[_Item]:
    """Group program arguments into flags with their values; ``--flag=v`` is (flag, [v]); a word that starts with
    ``last`` (a regex; "": none) is an item of its own."""
    out: list[_Item] = []
    for a in args:
        if a.startswith("--") or (last and re.match(last, a)):
            if "=" in a and a.startswith("--"):
                name, v = a.split("=", 1)
                out.append(_Item(name, [v], [a]))
            else:
                out.append(_Item(a, [], [a]))
        elif out and not re.fullmatch(r"-[A-Za-z].*", a):
            out[-1].values.append(a)
            out[-1].words.append(a)
        else:
            out.append(_Item("", [a], [a]))
    return out


def _quote(v: str) -> str:
    return shlex.quote(v)


def _bare(v: str, where: str) -> str:
    """``v`` for a spot that already sits inside the user's quoting (an assignment's value, a quoted option
    string): only words that need no quoting go there."""
    if shlex.quote(v) != v:
        raise EditError(f"{where}: {v!r} would need quoting inside the user's own quotes; edit it by hand")
    return v


_WORD = re.compile(r"""[ \t]*(?:\\\n[ \t]*)*("[^"\n]*"|'[^'\n]*'|[^\s"'\\)]+)""")


def _line_bounds(text: str, pos: int) -> tuple[int, int]:
    a = text.rfind("\n", 0, pos) + 1
    b = text.find("\n", pos)
    return a, (len(text) if b < 0 else b)


def _removal(text: str, pos: int, flag: str, nvals: int) -> tuple[int, int]:
    """The span to delete for the flag at ``pos`` and its ``nvals`` value words: a quoted word that held only them
    goes whole, and so does the line when nothing else is left on it."""
    start, end = pos, pos + len(flag)
    if text.startswith("=", end):
        end = re.compile(r"[^\s\"')]*").match(text, end + 1).end()
    else:
        for _ in range(nvals):
            m = _WORD.match(text, end)
            if not m or "\n" in text[end:m.start(1)]:
                break
            end = m.end(1)
    if start > 0 and text[start - 1] in "\"'" and text[end:end + 1] == text[start - 1]:
        if text[start - 2:start - 1] == "=":  # OPTS="--recompute-activations" -> OPTS=""
            return start, end
        start, end = start - 1, end + 1  # "--fp8-format hybrid": the whole quoted element
    a, b = _line_bounds(text, pos)
    if (text[a:start] + text[end:b]).strip(" \t\\") == "":
        return a, b + 1  # it was the line's only content
    while start > 0 and text[start - 1] in " \t":
        start -= 1
    return start, end


def _command_end(lines: list[str], line: int) -> int:
    k = line - 1
    while k < len(lines) - 1 and lines[k].rstrip().endswith("\\"):
        k += 1
    return k


def _passes_args(text: str, line: int) -> bool:
    """Whether the command that starts at ``line`` (1-based) passes on its script's own arguments (``"$@"``)."""
    lines = text.split("\n")
    k = _command_end(lines, line)
    return re.search(r"""(^|[\s"'])\$\{?[@*]""", "\n".join(lines[line - 1:k + 1])) is not None


def _insert_point(text: str, line: int, first: str | None, last: str = "") -> int:
    """Where new flags go in the command that starts at ``line`` (1-based): before the word that stays last
    (``last``, a regex), ``"$@"``, a redirection or pipe, or a comment, else at the end of its last continued line."""
    lines = text.split("\n")
    k = _command_end(lines, line)
    cmd_start = sum(len(x) + 1 for x in lines[:line - 1])
    cmd_end = sum(len(x) + 1 for x in lines[:k]) + len(lines[k])
    seg = text[cmd_start:cmd_end]
    stops = r"""[ \t]("\$@"|\$@|\d?>|&>|\||#""" + (f"|{last})" if last else ")")
    cands = [m.start() for m in re.finditer(stops, seg)]
    if first is not None:
        cands = [c for c in cands if seg[c + 1:].startswith(first)] or cands
    return cmd_start + (min(cands) if cands else len(seg.rstrip(" \t\\")))


class _Spans:
    """The span edits of a chain's files, made at once: (start, end, new text) per file, in the files' first
    offsets; overlapping edits are refused."""

    def __init__(self, texts: Mapping[str, str], main: str) -> None:
        self.texts, self.main = dict(texts), main
        self.edits: dict[str, list[tuple[int, int, str]]] = {}

    def file(self, span: Span) -> str | None:
        """The chain's file a span was read in (a reader given another name for a single file: that file)."""
        if span.path in self.texts:
            return span.path
        real = [p for p in self.texts if os.path.realpath(p) == os.path.realpath(span.path)]
        if real:
            return real[0]
        return next(iter(self.texts)) if len(self.texts) == 1 else None

    def add(self, path: str, start: int, end: int, new: str, what: str) -> None:
        got = self.edits.setdefault(path, [])
        if (start, end, new) in got:
            return
        if any(a < end and start < b or (a == b == start == end) for a, b, _ in got):
            raise EditError(f"{self.main}: {what}: written where another change is written; edit it by hand")
        got.append((start, end, new))

    def shifted(self, path: str, pos: int) -> int:
        """``pos`` of the file as it was, in the edited file (a position no edit covers)."""
        return pos + sum(len(new) - (b - a) for a, b, new in self.edits.get(path, []) if b <= pos)

    def applied(self) -> Texts:
        out = dict(self.texts)
        for path, edits in self.edits.items():
            t = out[path]
            for a, b, new in sorted(edits, reverse=True):
                t = t[:a] + new + t[b:]
            out[path] = t
        return out


def _new_value(want: str, span: Span, path: str) -> str:
    if span.var:
        return _bare(want, f"{path}: {span.var}")
    return _bare(want, path) if span.quoted else _quote(want)


def _cannot(main: str, flag: str, vals: list[str], want: list[str] | None) -> EditError:
    return EditError(f"{main}: cannot change {flag} {' '.join(vals)} -> "
                     f"{' '.join(want) if want is not None else '(removed)'} where it is written")


def _origins(words: list[str]) -> Counter:
    """How many words were read from each span (a value that several words read is shared)."""
    return Counter((s.path, s.start, s.end) for w in words if isinstance(w, Placed) for _, s in w.segs)


def edit_script(text: str, read: Callable[[str], Reading], *, target_args: list[str], target_env: Mapping[str, str],
                launch_line: int, env_keys: set[str], path: str = "launch", last: str = "") -> Edit:
    """``text`` edited so that ``read`` gives ``target_args`` and ``target_env`` (for ``env_keys``). Raises
    EditError when no minimal edit reads back as the target (also when the edited text cannot be read at all).
    ``last``: a regex for the word that stays last in the launch command (the adapter's
    :attr:`~infrarsi.adapters.base.LaunchFileAdapter.last_word`)."""
    edits = edit_files({path: text}, lambda t: read(t[path]), main=path, target_args=target_args,
                       target_env=target_env, launch_line=launch_line, env_keys=env_keys, last=last)
    return edits[path]


def edit_files(texts: Mapping[str, str], read: Callable[[Texts], Reading], *, main: str, target_args: list[str],
               target_env: Mapping[str, str], launch_line: int, env_keys: set[str],
               caller: tuple[str, int] | None = None, last: str = "") -> dict[str, Edit]:
    """The files of a launch chain (``texts``; ``main``: the one the launch command is in, at ``launch_line``)
    edited so that ``read`` gives ``target_args`` and ``target_env``: each value changed at the span ``read`` read
    it from, in whichever file that is; new flags in ``main`` or, when the launch command passes on its script's
    arguments (``"$@"``), at the end of the command that runs that script (``caller``: its file and line, None for
    the outermost script); new ``export`` lines in ``main`` above the launch. Every file is returned, with its edit
    (``changed_lines`` 0: untouched). EditError as :func:`edit_script`."""
    old: Texts = dict(texts)
    args0, env0, _, fixed0 = read(old)
    spans = _Spans(old, main)
    items = _items(args0, last)
    after = {i.flag: i.values for i in _items(target_args, last)}
    before = {i.flag: i.values for i in items}
    read_last = {i.flag: k for k, i in enumerate(items)}  # a repeated flag is read at its last place
    shared = _origins(args0)

    # 1. values that change and flags that go, where they were read
    for k, it in enumerate(items):
        want = after.get(it.flag)
        if not it.flag.startswith("--") or (want is not None and (want == it.values or read_last[it.flag] != k)):
            continue
        if want is None:
            at = at_of(it.words[0])
            fp = spans.file(at) if at is not None and str(it.words[0]).startswith(it.flag) else None
            if fp is None:
                raise _cannot(main, it.flag, it.values, want)
            a, b = _removal(old[fp], at.start, it.flag, len(it.values))
            spans.add(fp, a, b, "", it.flag)
            continue
        if len(it.values) != 1 or len(want) != 1:
            raise _cannot(main, it.flag, it.values, want)
        word = it.words[-1]
        value = part_of(word, len(it.flag) + 1, len(word)) if len(it.words) == 1 else word
        at, site = at_of(value), site_of(value)
        if at is not None and site is not None and shared[(at.path, at.start, at.end)] > 1:
            at = None  # other words read that assignment too: the value changes at this word only
        if at is not None and (fp := spans.file(at)) is not None:
            spans.add(fp, at.start, at.end, _new_value(want[0], at, fp), it.flag)
        elif site is not None and (fp := spans.file(site)) is not None:
            spans.add(fp, site.start, site.end, _quote(want[0]), it.flag)
        else:
            raise _cannot(main, it.flag, it.values, want)

    # 2. the word the framework keeps last (torchtitan 0.3's activation-checkpoint choice), where it stands
    old_sub = next((i.flag for i in items if last and re.match(last, i.flag)), None)
    new_sub = next((f for f in after if last and re.match(last, f)), None)
    if old_sub != new_sub and old_sub is not None:
        at = at_of(old_sub)
        if at is None or spans.file(at) is None:
            raise EditError(f"{main}: cannot find {old_sub} once in the script")
        spans.add(spans.file(at), at.start, at.end, new_sub or "", old_sub)

    # 3. the environment knobs, where their value was assigned; a key is written unquoted: it must be a name
    exports: list[str] = []
    for key in sorted(env_keys):
        if not ENV_NAME.fullmatch(key):
            raise EditError(f"{main}: environment key {key!r} is no variable's name (letters, digits, '_'); fix "
                            f"workload.env in the contract")
        was, want = env0.get(key), target_env.get(key)
        if was == want:
            continue
        at = at_of(was) if was is not None else None
        fp = spans.file(at) if at is not None else None
        if want is None:
            a, b = _line_bounds(old[fp], at.start) if fp is not None else (0, 0)
            if fp is None or not re.match(rf"[ \t]*(?:export[ \t]+)?{re.escape(key)}=", old[fp][a:b]):
                raise EditError(f"{main}: cannot change {key} where it is set")
            spans.add(fp, a, b + 1, "", key)
        elif fp is not None:
            spans.add(fp, at.start, at.end, _bare(want, f"{fp}: {key}"), key)
        else:
            exports.append(f"export {key}={_quote(want)}")

    line = launch_line + _lines_moved(spans, main, old[main], launch_line)
    new = spans.applied()

    # 4. flags the setting adds: at the end of the launch command, before the word that stays last (``last``), or
    # with the ones the calling script gives when the launch passes its script's arguments on
    added = [(f, v) for f, v in after.items() if f.startswith("--") and f not in before]
    words = [w for f, v in added for w in (f, *v)] + ([new_sub] if new_sub is not None and old_sub is None else [])
    if words:
        if caller is not None and old_sub is None and _passes_args(new[main], line):
            cp, cl = caller
            cl += _lines_moved(spans, cp, old[cp], cl)
            at = _insert_point(new[cp], cl, None, last)
            new[cp] = new[cp][:at] + " " + " ".join(_quote(w) for w in words) + new[cp][at:]
        else:
            t = new[main]
            at = _insert_point(t, line, new_sub if old_sub is not None else None, last)
            if t[at - 1:at] in ("\"", "'") and _inside_quotes(args0, spans, t, at - 1):
                at -= 1  # a command inside a quoted string (sh -c "cd /repo; python pretrain_gpt.py ..."): inside it
            new[main] = t[:at] + " " + " ".join(_quote(w) for w in words) + t[at:]
    if exports:
        lines = new[main].split("\n")
        lines[line - 1:line - 1] = exports
        new[main] = "\n".join(lines)
    _read_back(new, read, main, target_args, target_env, env_keys, fixed0, before, after)
    return {p: Edit(text=new[p], changed_lines=changed_lines(old[p], new[p])) for p in old}


def _lines_moved(spans: _Spans, path: str, text: str, line: int) -> int:
    """How many lines the span edits add (+) or remove (-) above ``line`` of ``path``."""
    pos = sum(len(x) + 1 for x in text.split("\n")[:line - 1])
    return sum(new.count("\n") - text[a:b].count("\n") for a, b, new in spans.edits.get(path, []) if b <= pos)


def _inside_quotes(args: list[str], spans: _Spans, text: str, quote: int) -> bool:
    """Whether the quote at ``quote`` of the edited launch file closes a string the launch command was read from:
    its last program argument read right before it, unquoted (a word of a ``bash -c`` string)."""
    for w in reversed(args):
        at = at_of(w)
        if at is None or spans.file(at) != spans.main:
            continue
        end = spans.shifted(spans.main, at.end)
        return not at.quoted and end <= quote and text[end:quote].strip(" \t\\\n") == ""
    return False


def _reads_as(args: list[str], target: list[str]) -> bool:
    """Whether ``args`` read as ``target`` does: each flag's value at its last place (where the framework reads it;
    a repeated flag's earlier places keep the user's values), the words of no flag in order."""
    got, want = _items(args), _items(target)
    return ({i.flag: i.values for i in got} == {i.flag: i.values for i in want}
            and [i.values for i in got if not i.flag] == [i.values for i in want if not i.flag])


def _read_back(new: Texts, read, main: str, target_args, target_env, env_keys, fixed0, before, after) -> None:
    """The edited files read once: the tuned launch, the tuned environment and the same workload, else EditError."""
    try:
        args1, env1, _, fixed1 = read(new)
    except ValueError as e:  # the reader's own refusal (e.g. no launch command left): one line, nothing written
        raise EditError(f"{main}: the edited script cannot be read back ({' '.join(str(e).split())})") from None
    if args1 != target_args and sorted(args1) != sorted(target_args) and not _reads_as(args1, target_args):
        got = {i.flag: i.values for i in _items(args1)}
        for flag, want in after.items():
            if flag.startswith("--") and got.get(flag) != want and flag in before:
                raise _cannot(main, flag, before[flag], want)
        raise EditError(f"{main}: the edited script reads back as `{shlex.join(args1)}`, not the tuned launch")
    if any(env1.get(k) != target_env.get(k) for k in env_keys):
        raise EditError(f"{main}: the edited script's environment does not read back as the tuned one")
    if fixed1 != fixed0:
        raise EditError(f"{main}: the edit would change the workload ({sorted(k for k in fixed0 if fixed0[k] != fixed1.get(k))})")


def edit_toml(text: str, values: Mapping[str, Any], *, path: str = "job.toml") -> Edit:
    """The job file with ``values`` ("section.field" -> value) set in place."""
    try:
        new = set_values(text, values, path=path)
    except TomlEditError as e:
        raise EditError(str(e)) from None
    return Edit(text=new, changed_lines=changed_lines(text, new))


def changed_lines(a: str, b: str) -> int:
    return sum(1 for ln in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
               if ln[:1] in "+-" and not ln.startswith(("+++", "---")))


# --------------------------------------------------------------------------- the contract's launch file
def _caller(parsed: Any) -> tuple[str, int] | None:
    """(file, line) of the command that runs the script the launch command is in; None when it is the outermost."""
    chain = getattr(parsed, "chain", None)
    if chain is None or not chain.hops:
        return None
    return chain.hops[-1].path, chain.hops[-1].line


def edit_launch_file(adapter: LaunchFileAdapter, contract: Contract,
                     setting: Mapping[str, Any]) -> tuple[Path, Edit] | None:
    """(path, edit) of the contract's launch file (``workload.launch``) that writes the tuned ``setting`` into it;
    None when the workload names no launch file. EditError when the change cannot be made as a minimal edit, or
    when it is made in another script of the launch's chain (see :func:`edit_launch_files`)."""
    got = edit_launch_files(adapter, contract, setting)
    if got is None:
        return None
    top, *others = got
    if any(e.changed_lines for _, e in others):
        raise EditError(f"{top[0]}: the tuned setting is written in {', '.join(str(p) for p, _ in others)} too")
    return top


def edit_launch_files(adapter: LaunchFileAdapter, contract: Contract,
                      setting: Mapping[str, Any]) -> list[tuple[Path, Edit]] | None:
    """(path, edit) of each file of the contract's launch (``workload.launch``, then the scripts it runs to reach
    the launch command, :mod:`infrarsi.launch.chain`) that together write the tuned ``setting`` into it, the launch
    file first; an untouched file has ``changed_lines`` 0. What the files must read as is the adapter's
    :meth:`~infrarsi.adapters.base.LaunchFileAdapter.edit` of the user's launch (never a trial's form). None when
    the workload names no launch file. EditError when the change cannot be made as a minimal edit."""
    from ..adapters.workload import Workload

    workload = Workload(contract, adapter.base_dir, adapter)
    if not workload.reads_launch_file:
        return None
    p = workload.path
    text = p.read_text()
    parsed = workload.parsed()
    try:
        target = adapter.edit(contract, setting)
    except ValueError as e:  # the adapter's refusal: the change cannot be written into the user's launch
        raise EditError(f"{p}: {' '.join(str(e).split())}") from None
    if target.job_values is not None:  # a bare job file: the changed fields go into it
        return [(p, edit_toml(text, target.job_values, path=str(p)))]
    chain = getattr(parsed, "chain", None)
    top = str(p)
    texts = {top: text, **{k: v for k, v in (chain.files if chain is not None else {}).items() if k != top}}
    main = (chain.command.path if chain is not None and chain.command is not None else None) or top

    def read(t: Texts) -> Reading:
        return adapter.reading(contract, t[top], t)

    try:
        edits = edit_files(texts, read, main=main, target_args=target.args, target_env=target.env,
                           launch_line=parsed.launch.line or 1, env_keys=adapter.env_keys(), last=adapter.last_word,
                           caller=_caller(parsed))
    except EditError:
        raise
    except ValueError as e:  # the launch reader's refusal of a text on the way: one line, the caller falls back
        raise EditError(f"{p}: {' '.join(str(e).split())}") from None
    return [(Path(k), e) for k, e in edits.items()]
