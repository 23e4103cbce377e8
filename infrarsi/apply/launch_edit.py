"""The tuned setting as a minimal edit of the user's own launch file: the .sh, the TOML job file, the 0.3 command line.

A training team reviews a five-line diff of the script they already run; nobody reviews a regenerated
one. So ``apply`` changes the file the contract names where the user wrote each thing:

- a knob flag's value where it stands: ``--tensor-model-parallel-size 8`` -> ``4`` on its line, or, when
  the flag takes a variable (``--tensor-model-parallel-size ${TP}``), the variable's assignment
  (``TP=8`` -> ``TP=4``, ``TP=${TP:-8}`` -> ``TP=${TP:-4}``), inside arrays and option strings alike;
- a flag the new setting drops (``--overlap-param-gather``) is deleted, with its line when it stood alone;
- a flag the setting adds is written at the end of the launch command (before ``"$@"``, a redirection or the
  word the framework keeps last, ``last``: torchtitan 0.3's ``activation-checkpoint:`` choice);
- an environment knob (``NCCL_ALGO``) is changed in its ``export`` line, or a new ``export`` line is added
  before the launch;
- a TOML job file gets the changed fields (:mod:`infrarsi.launch.toml_edit`).

Comments, layout, variables and every other byte stay. Each edit is read back with the project's own
script reader: the edited file must give exactly the tuned launch (the same one the trials ran) and the
same workload, else the edit is refused with the reason (:class:`EditError`) and nothing is written.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..contract.model import ENV_NAME
from ..launch.toml_edit import TomlEditError, set_values

if TYPE_CHECKING:
    from ..adapters.base import LaunchFileAdapter
    from ..contract.model import Contract

# A script "reading": program arguments and environment of its launch command, and the setting and workload.
Reading = tuple[list[str], dict[str, str], dict[str, Any], dict[str, Any]]


class EditError(ValueError):
    """The change cannot be written as a minimal edit of the user's file (the reason, one line)."""


@dataclass(frozen=True)
class Edit:
    text: str  # the edited file
    changed_lines: int


def _items(args: list[str], last: str = "") -> list[tuple[str, list[str]]]:
    """Group program arguments into (flag, values); ``--flag=v`` is (flag, [v]); a word that starts with ``last``
    (a regex; "": none) is an item of its own."""
    out: list[tuple[str, list[str]]] = []
    for a in args:
        if a.startswith("--") or (last and re.match(last, a)):
            if "=" in a and a.startswith("--"):
                name, v = a.split("=", 1)
                out.append((name, [v]))
            else:
                out.append((a, []))
        elif out and not re.fullmatch(r"-[A-Za-z].*", a):
            out[-1][1].append(a)
        else:
            out.append(("", [a]))
    return out


def _quote(v: str) -> str:
    return shlex.quote(v)


def _bare(v: str, where: str) -> str:
    """``v`` for a spot that already sits inside the user's quoting (an assignment's value, a quoted option
    string): only words that need no quoting go there."""
    if shlex.quote(v) != v:
        raise EditError(f"{where}: {v!r} would need quoting inside the user's own quotes; edit it by hand")
    return v


def _code_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each line's code (a full-line comment has none; ``#SBATCH`` lines are comments)."""
    spans, pos = [], 0
    for ln in text.split("\n"):
        if not ln.lstrip().startswith("#"):
            spans.append((pos, pos + len(ln)))
        pos += len(ln) + 1
    return spans


def _occurrences(text: str, flag: str) -> list[int]:
    """Offsets where ``flag`` stands as a whole word in code (also ``flag=...``)."""
    out = []
    pat = re.compile(r"(?<![\w\-.])" + re.escape(flag) + r"(?=[\s=\"')\\]|$)")
    for a, b in _code_spans(text):
        out += [m.start() for m in pat.finditer(text, a, b)]
    return out


_WORD = re.compile(r"""[ \t]*(?:\\\n[ \t]*)*("[^"\n]*"|'[^'\n]*'|[^\s"'\\)]+)""")


def _value_span(text: str, pos: int, flag: str) -> tuple[int, int, str] | None:
    """(start, end, raw) of the value word after the flag at ``pos`` (``flag=v``: the v part)."""
    end = pos + len(flag)
    if text.startswith("=", end):
        m = re.compile(r"[^\s\"')]*").match(text, end + 1)
        return end + 1, m.end(), m.group(0)
    if end < len(text) and text[end] in "\"'":
        # the flag and its value inside one quoted word ("--fp8-format hybrid")
        m = re.compile(r"[ \t]+([^\s\"']+)").match(text, end)
        return (m.start(1), m.end(1), m.group(1)) if m else None
    m = _WORD.match(text, end)
    if not m or m.group(1).startswith("-") and not re.fullmatch(r"-\.?\d.*", m.group(1).strip("\"'")):
        return None
    return m.start(1), m.end(1), m.group(1)


_VAR = re.compile(r"""^"?\$\{?([A-Za-z_]\w*)\}?"?$""")


def _assignment(text: str, var: str, old: str) -> tuple[int, int] | None:
    """The span of the literal that gives ``var`` the value ``old``: ``VAR=old``, ``VAR="old"`` or
    ``VAR=${VAR:-old}`` (the last such assignment)."""
    found = None
    pat = re.compile(rf"(?m)^[ \t]*(?:export[ \t]+)?{re.escape(var)}=(.*)$")
    for m in pat.finditer(text):
        rhs, start = m.group(1).split(" #")[0].rstrip(), m.start(1)
        d = re.fullmatch(rf"""\$\{{{re.escape(var)}:?-("?)([^}}"]*)\1\}}""", rhs)
        if d and d.group(2) == old:
            found = (start + d.start(2), start + d.end(2))
        elif rhs.strip("\"'") == old:
            q = 1 if rhs[:1] in "\"'" else 0
            found = (start + q, start + len(rhs) - q)
    return found


def _line_bounds(text: str, pos: int) -> tuple[int, int]:
    a = text.rfind("\n", 0, pos) + 1
    b = text.find("\n", pos)
    return a, (len(text) if b < 0 else b)


def _remove(text: str, pos: int, flag: str, nvals: int) -> str:
    """``text`` without the flag at ``pos`` and its ``nvals`` value words; a quoted word that held only them
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
            return text[:start] + text[end:]
        start, end = start - 1, end + 1  # "--fp8-format hybrid": the whole quoted element
    a, b = _line_bounds(text, pos)
    if (text[a:start] + text[end:b]).strip(" \t\\") == "":
        return text[:a] + text[b + 1:]  # it was the line's only content
    while start > 0 and text[start - 1] in " \t":
        start -= 1
    return text[:start] + text[end:]


def _passes_args(text: str, line: int) -> bool:
    """Whether the command that starts at ``line`` (1-based) passes on its script's own arguments (``"$@"``)."""
    lines = text.split("\n")
    k = line - 1
    while k < len(lines) - 1 and lines[k].rstrip().endswith("\\"):
        k += 1
    return re.search(r"""(^|[\s"'])\$\{?[@*]""", "\n".join(lines[line - 1:k + 1])) is not None


def _insert_point(text: str, line: int, first: str | None, last: str = "") -> int:
    """Where new flags go in the launch command that starts at ``line`` (1-based): before the word that stays last
    (``last``, a regex), ``"$@"``, a redirection or pipe, or a comment, else at the end of its last continued line."""
    lines = text.split("\n")
    k = line - 1
    while k < len(lines) - 1 and lines[k].rstrip().endswith("\\"):
        k += 1
    cmd_start = sum(len(x) + 1 for x in lines[:line - 1])
    cmd_end = sum(len(x) + 1 for x in lines[:k]) + len(lines[k])
    seg = text[cmd_start:cmd_end]
    stops = r"""[ \t]("\$@"|\$@|\d?>|&>|\||#""" + (f"|{last})" if last else ")")
    cands = [m.start() for m in re.finditer(stops, seg)]
    if first is not None:
        cands = [c for c in cands if seg[c + 1:].startswith(first)] or cands
    return cmd_start + (min(cands) if cands else len(seg.rstrip(" \t\\")))


def edit_script(text: str, read: Callable[[str], Reading], *, target_args: list[str], target_env: Mapping[str, str],
                launch_line: int, env_keys: set[str], path: str = "launch",
                line_of: Callable[[str], int | None] | None = None, last: str = "") -> Edit:
    """``text`` edited so that ``read`` gives ``target_args`` and ``target_env`` (for ``env_keys``). Raises
    EditError when no minimal edit reads back as the target (also when the edited text cannot be read at all).

    ``line_of`` gives the 1-based line the launch command starts on in an edited text: new flags and ``export``
    lines go by the command's place after the edits before them (a flag removed with its line above the command
    moves it up); without it, ``launch_line`` is used throughout. ``last``: a regex for the word that stays last in
    the launch command (the adapter's :attr:`~infrarsi.adapters.base.LaunchFileAdapter.last_word`)."""
    edits = edit_files({path: text}, lambda t: read(t[path]), main=path, target_args=target_args,
                       target_env=target_env, launch_line=launch_line, env_keys=env_keys,
                       line_of=None if line_of is None else (lambda t: line_of(t[path])), last=last)
    return edits[path]


Texts = dict[str, str]  # the files of a launch chain, path -> text, outermost first


def edit_files(texts: Mapping[str, str], read: Callable[[Texts], Reading], *, main: str, target_args: list[str],
               target_env: Mapping[str, str], launch_line: int, env_keys: set[str],
               line_of: Callable[[Texts], int | None] | None = None,
               outer: Callable[[Texts], tuple[str, int] | None] | None = None, last: str = "") -> dict[str, Edit]:
    """The files of a launch chain (``texts``; ``main``: the one the launch command is in) edited so that ``read``
    gives ``target_args`` and ``target_env``: each value changed in the file where it is written (a flag in the
    script that passes it, a variable where it is assigned: an ``export TP=4`` in the sbatch file for a
    ``--tensor-model-parallel-size $TP`` in train.sh), new flags and ``export`` lines in ``main``; when the launch
    command passes on its script's arguments (``"$@"``), new flags go at the end of the command that runs that script
    (``outer``: its file and line, None for the outermost script). Every file is returned, with its edit
    (``changed_lines`` 0: untouched). EditError as :func:`edit_script`."""
    old: Texts = dict(texts)
    args0, env0, _, fixed0 = read(old)
    new: Texts = dict(old)
    before = dict(_items(args0, last))
    after = dict(_items(target_args, last))

    def state(t: Texts) -> dict[str, list[str]]:
        return dict(_items(read(t)[0], last))

    def line(t: Texts) -> int:
        try:
            got = line_of(t) if line_of is not None else None
        except ValueError:
            got = None
        return got or launch_line

    # 1. values that change and flags that go, where the user wrote them. A change whose text cannot be read on
    # its own (PP 4 -> 16 before --num-layers-per-virtual-pipeline-stage follows) waits for the others.
    todo = [(flag, vals) for flag, vals in _items(args0, last) if flag.startswith("--") and after.get(flag) != vals]
    while todo:
        waiting = []
        for flag, vals in todo:
            got = _change(new, flag, vals, after.get(flag), state, main, outer)
            if got is None:
                waiting.append((flag, vals))
            else:
                new = got
        if len(waiting) == len(todo):
            flag, vals = waiting[0]
            want = after.get(flag)
            raise EditError(f"{main}: cannot change {flag} {' '.join(vals)} -> "
                            f"{' '.join(want) if want is not None else '(removed)'} where it is written")
        todo = waiting
    new = _add_and_export(new, main, args0, env0, target_args, target_env, env_keys, before, line, state, read,
                          outer, last)
    try:
        args1, env1, _, fixed1 = read(new)
    except ValueError as e:  # the reader's own refusal (e.g. no launch command left): one line, nothing written
        raise EditError(f"{main}: the edited script cannot be read back ({' '.join(str(e).split())})") from None
    if args1 != target_args and sorted(args1) != sorted(target_args):
        raise EditError(f"{main}: the edited script reads back as `{shlex.join(args1)}`, not the tuned launch")
    if any(env1.get(k) != target_env.get(k) for k in env_keys):
        raise EditError(f"{main}: the edited script's environment does not read back as the tuned one")
    if fixed1 != fixed0:
        raise EditError(f"{main}: the edit would change the workload ({sorted(k for k in fixed0 if fixed0[k] != fixed1.get(k))})")
    return {p: Edit(text=new[p], changed_lines=changed_lines(old[p], new[p])) for p in old}


def _inner_first(texts: Texts, main: str) -> list[str]:
    """The chain's files, the launch command's first, then from the innermost outwards: where a value the launch
    sees was set last."""
    return [main, *[p for p in reversed(list(texts)) if p != main]]


_POSITIONAL = re.compile(r"""^"?\$\{?(\d)\}?"?$""")


def _argument_spans(text: str, line: int) -> list[tuple[int, int, str]]:
    """(start, end, raw) of each word of the command that starts at ``line`` (1-based), continuation lines included,
    up to a redirection, pipe or comment."""
    lines = text.split("\n")
    k = line - 1
    while k < len(lines) - 1 and lines[k].rstrip().endswith("\\"):
        k += 1
    pos = sum(len(x) + 1 for x in lines[:line - 1])
    end = sum(len(x) + 1 for x in lines[:k]) + len(lines[k])
    out = []
    while pos < end:
        m = _WORD.match(text, pos)
        if not m or m.end(1) > end or re.match(r"\d?>|&>|\||#|;", m.group(1)):
            break
        out.append((m.start(1), m.end(1), m.group(1)))
        pos = m.end(1)
    return out


def _positional(new: Texts, fp: str, main: str, var: str | None, raw: str,
                outer) -> list[tuple[str, int, int, str]]:
    """Where the launch script's positional argument (``--tp $1``, or ``TP=$1`` then ``--tp $TP``) is written: the
    N-th argument of the command that runs the script, as (file, start, end, raw word); [] when the value is not a
    positional argument of the launch command's script ``main`` (or that script is the outermost)."""
    if fp != main:
        return []
    n = _POSITIONAL.match(raw)
    if n is None and var is not None:
        m = None
        for m in re.finditer(rf"(?m)^[ \t]*(?:export[ \t]+)?{re.escape(var)}=(\S*)", new[fp]):
            pass
        n = _POSITIONAL.match(m.group(1)) if m is not None else None
    caller = outer(new) if (n is not None and outer is not None) else None
    if caller is None:
        return []
    cp, cl = caller
    words = _argument_spans(new[cp], cl)
    script = os.path.basename(fp)
    at = next((i for i, (_, _, w) in enumerate(words) if os.path.basename(w.strip("\"'")) == script), None)
    if at is None or at + int(n.group(1)) >= len(words):
        return []
    a, b, arg = words[at + int(n.group(1))]
    return [(cp, a, b, arg)]


def _change(new: Texts, flag: str, vals: list[str], want: list[str] | None, state, main: str,
            outer=None) -> Texts | None:
    """``new`` with ``flag``'s values ``vals`` changed to ``want`` (None: removed) where it is written, the rest of
    the launch as it was; None when no such edit reads back. A value given by a variable is changed where the
    variable is assigned, in whichever file of the chain that is, before it is changed at the flag."""
    options: list[Texts] = []
    order = _inner_first(new, main)
    for fp in order:
        text = new[fp]
        for pos in reversed(_occurrences(text, flag)):
            if want is None:
                options.append({**new, fp: _remove(text, pos, flag, len(vals))})
                continue
            if len(vals) != 1 or len(want) != 1:
                continue
            span = _value_span(text, pos, flag)
            if span is None:
                continue
            a, b, raw = span
            var = _VAR.match(raw)
            for cp, ca, cb, arg in _positional(new, fp, main, var.group(1) if var else None, raw, outer):
                t = new[cp]
                argvar = _VAR.match(arg)
                asg = _assignment(t, argvar.group(1), vals[0]) if argvar else None
                if asg:  # `bash train.sh $TP_SIZE`: where TP_SIZE is assigned
                    options.append({**new, cp: t[:asg[0]] + _bare(want[0], f"{cp}: {argvar.group(1)}") + t[asg[1]:]})
                options.append({**new, cp: t[:ca] + _quote(want[0]) + t[cb:]})
            if var:
                for vp in order:
                    asg = _assignment(new[vp], var.group(1), vals[0])
                    if asg:
                        t = new[vp]
                        options.append({**new, vp: t[:asg[0]] + _bare(want[0], f"{vp}: {var.group(1)}") + t[asg[1]:]})
                options.append({**new, fp: text[:a] + _quote(want[0]) + text[b:]})
            else:
                options.append({**new, fp: text[:a] + (_quote(want[0]) if raw[:1] not in "\"'"
                                                       else raw[0] + _bare(want[0], fp) + raw[0]) + text[b:]})
    try:
        now = state(new)
    except ValueError:
        now = None
    for cand in options:
        try:
            got = state(cand)
        except ValueError:
            continue
        if got.get(flag) == want and (now is None or all(got.get(f) == v for f, v in now.items() if f != flag)):
            return cand
    return None


def _add_and_export(texts: Texts, main: str, args0, env0, target_args, target_env, env_keys, before, line,
                    state, read, outer, last: str) -> Texts:
    texts = dict(texts)
    new = texts[main]
    # 2. flags the setting adds: at the end of the launch command, before the word that stays last (``last``)
    added = [(f, v) for f, v in _items(target_args, last) if f.startswith("--") and f not in before]
    old_sub = next((f for f, _ in _items(args0, last) if last and re.match(last, f)), None)
    new_sub = next((f for f, _ in _items(target_args, last) if last and re.match(last, f)), None)
    if old_sub != new_sub and old_sub is not None:
        at = [m.start() for a, b in _code_spans(new) for m in re.finditer(re.escape(old_sub), new[:b]) if m.start() >= a]
        if len(at) != 1:
            raise EditError(f"{main}: cannot find {old_sub} once in the script")
        new = new[:at[0]] + (new_sub or "") + new[at[0] + len(old_sub):]
    words = [w for f, v in added for w in (f, *v)] + ([new_sub] if new_sub is not None and old_sub is None else [])
    caller = outer({**texts, main: new}) if words and outer is not None and old_sub is None else None
    if caller is not None and _passes_args(new, line({**texts, main: new})):
        # the launch passes on its script's arguments ("$@"): new flags go with the ones the calling script gives
        cp, cl = caller
        ct = new if cp == main else texts[cp]
        at = _insert_point(ct, cl, None, last)
        cand = ct[:at] + " " + " ".join(_quote(w) for w in words) + ct[at:]
        trial = {**texts, main: new, cp: cand}
        try:
            got = state(trial)
        except ValueError:
            got = {}
        if all(got.get(f) == v for f, v in added):
            new, texts, words = trial[main], trial, []
    if words:
        at = _insert_point(new, line({**texts, main: new}), new_sub if old_sub is not None else None, last)
        # a command inside a quoted string (srun ... sh -c "cd /repo; python pretrain_gpt.py ..."): the new flags go
        # inside the string when that is what reads back
        spots = [at - 1, at] if new[at - 1:at] in ("\"", "'") else [at]
        for k, spot in enumerate(spots):
            cand = new[:spot] + " " + " ".join(_quote(w) for w in words) + new[spot:]
            try:
                got = state({**texts, main: cand})
            except ValueError:
                continue
            if k == len(spots) - 1 or all(f in got for f, _ in added):
                new = cand
                break
    texts[main] = new
    # 3. the environment knobs, where they are set (the launch command's file first, then outwards: the first
    # assignment whose edit reaches the launch), else a new export line above the launch command; a key is written
    # unquoted: it must be a name
    for key in sorted(env_keys):
        if not ENV_NAME.fullmatch(key):
            raise EditError(f"{main}: environment key {key!r} is no variable's name (letters, digits, '_'); fix "
                            f"workload.env in the contract")
        old, want = env0.get(key), target_env.get(key)
        if old == want:
            continue
        cands: list[Texts] = []
        for fp in _inner_first(texts, main):
            m = None
            for m in re.finditer(rf"(?m)^[ \t]*(?:export[ \t]+)?{re.escape(key)}=.*$", texts[fp]):
                pass
            if m is None:
                continue
            t = texts[fp]
            if want is None:
                a, b = m.span()
                cands.append({**texts, fp: t[:a] + t[b + 1:]})
            elif (asg := _assignment(t, key, old or "")) is not None:
                cands.append({**texts, fp: t[:asg[0]] + _bare(want, f"{fp}: {key}") + t[asg[1]:]})
        if want is not None and old is not None:  # `env KEY=v cmd`, `KEY=v cmd`, a runner's `--env KEY=v`
            for fp in _inner_first(texts, main):
                t = texts[fp]
                for a, b in _code_spans(t):
                    for m in re.finditer(rf"(?<![\w$-]){re.escape(key)}=(\"?)([^\s\"',;]*)\1", t[a:b]):
                        if m.group(2) == old:
                            at = a + m.start(2)
                            cands.append({**texts, fp: t[:at] + _bare(want, f"{fp}: {key}") + t[at + len(old):]})
        if want is not None:
            lines = texts[main].split("\n")
            lines.insert(line(texts) - 1, f"export {key}={_quote(want)}")
            cands.append({**texts, main: "\n".join(lines)})
        if not cands:
            raise EditError(f"{main}: cannot change {key} where it is set")
        texts = next((c for c in cands if _env_of(read, c).get(key) == want), cands[0])
    return texts


def _env_of(read, texts: Texts) -> dict[str, str]:
    try:
        return read(texts)[1]
    except ValueError:
        return {}


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

    la = parsed.launch
    try:
        edits = edit_files(texts, read, main=main, target_args=target.args, target_env=target.env,
                           launch_line=la.line or 1, env_keys=adapter.env_keys(), last=adapter.last_word,
                           line_of=lambda t: (adapter.reread(contract, t[top], t).launch or la).line,
                           outer=lambda t: _caller(adapter.reread(contract, t[top], t)))
    except EditError:
        raise
    except ValueError as e:  # the launch reader's refusal of a text on the way: one line, the caller falls back
        raise EditError(f"{p}: {' '.join(str(e).split())}") from None
    return [(Path(k), e) for k, e in edits.items()]
