"""Reading launch scripts and launcher command lines (torchrun, srun) without running them.

Training launches are usually bash scripts in the style of Megatron-LM's ``examples/``: variables
with defaults (``TP=${TP:-1}``), arithmetic (``WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))``), bash
arrays (``GPT_MODEL_ARGS=( --num-layers 96 ... )``, ``ARGS+=(...)``), ``if [ ... ]`` branches, line
continuations, and finally ``torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${GPT_MODEL_ARGS[@]} ...``.

:func:`interpret_script` evaluates that subset of bash the way bash would (word splitting of unquoted
expansions included) and returns every command it would run, expanded, with its line number.
Commands are never executed: ``$(...)`` and backticks stay as their literal text, file tests
(``[ -f x ]``) are taken as true. A construct outside the subset (loops, functions, ``case``) or a
condition it cannot evaluate raises :class:`ScriptError` naming the line.

:func:`split_launcher` splits one expanded command into launcher (torchrun/srun/python), the
program (a script or ``-m module``) and the program's arguments, and reads the world size the
launcher states.
"""

from __future__ import annotations

import ast
import fnmatch
import operator
import os
import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass, field

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
    def __init__(self, text: str, path: str = "") -> None:
        self.t = text
        self.i = 0
        self.n = len(text)
        self.path = path
        self.line = 1

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
            part = ("var", t[i + 2:j], quoted)
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

        def flush(quoted: bool = False) -> None:
            if buf:
                parts.append(("lit", "".join(buf), quoted))
                buf.clear()

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
                    w = Word([("lit", name_part, False)], line, array=elems)
                    w.raw = t[start:self.i]
                    return w
                break
            if c == "\\":
                if self.i + 1 < self.n and t[self.i + 1] == "\n":
                    self._adv(2)  # line continuation
                    continue
                flush()
                if self.i + 1 < self.n:
                    parts.append(("lit", t[self.i + 1], True))
                self._adv(2)
                continue
            if c == "'":
                j = t.find("'", self.i + 1)
                if j < 0:
                    raise self.err("unclosed single quote; close it on the same logical line", line)
                flush()
                parts.append(("lit", t[self.i + 1:j], True))
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
            buf.append(c)
            self._adv(1)
        flush()
        w = Word(parts, line)
        w.raw = t[start:self.i]
        return w

    def _dquote(self, parts: list[Part], line: int) -> None:
        t = self.t
        buf: list[str] = []
        n_before = len(parts)
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
                    buf.append(nxt)
                    self._adv(2)
                    continue
                buf.append(c)
                self._adv(1)
                continue
            if c == "$" or c == "`":
                if buf:
                    parts.append(("lit", "".join(buf), True))
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
            buf.append(c)
            self._adv(1)
        # "" is an empty word, not nothing ("$@" with no arguments is nothing)
        if buf or len(parts) == n_before:
            parts.append(("lit", "".join(buf), True))

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


# --------------------------------------------------------------------------- evaluation
@dataclass
class Command:
    """One simple command as bash would run it: expanded argv, assignments before it, its line."""

    argv: list[str]
    env: dict[str, str]
    line: int


@dataclass
class ScriptResult:
    commands: list[Command]
    variables: dict[str, str | list[str]]
    exported: dict[str, str]  # variables the script exports (their final values)
    sbatch: list[str] = field(default_factory=list)  # #SBATCH directive arguments, in order
    exit_line: int | None = None  # where the script exits (an `exit` it reaches), if it does


_ARITH_OPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}


def _arith(expr: str, lookup) -> int:
    """Evaluate a bash arithmetic expression (integers, + - * / % **, parentheses, names)."""
    expr = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", r"\1", expr)

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            val = lookup(node.id)
            return int(val) if val not in (None, "") else 0
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
            return _ARITH_OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        raise ValueError(f"unsupported arithmetic {expr!r}")

    return ev(ast.parse(expr.replace("/", "//").replace("////", "//").strip(), mode="eval"))


class _Interp:
    def __init__(self, path: str, env: dict[str, str] | None, args: list[str] | None) -> None:
        self.path = path
        self.vars: dict[str, str | list[str]] = dict(env or {})
        self.exported: set[str] = set()
        self.args = list(args or [])
        self.commands: list[Command] = []

    def err(self, line: int, msg: str) -> ScriptError:
        return ScriptError(line, msg, path=self.path)

    # ---- values
    def get(self, name: str) -> str | None:
        if name.isdigit():
            k = int(name)
            if k == 0:
                return self.path or "script"
            return self.args[k - 1] if k <= len(self.args) else None
        if name in ("@", "*"):
            return " ".join(self.args)
        if name == "#":
            return str(len(self.args))
        v = self.vars.get(name)
        if isinstance(v, list):
            return v[0] if v else ""
        return v

    def _param(self, expr: str, line: int) -> list[str] | str:
        """${...}: returns a list for ${ARR[@]} (one item per element), else a string."""
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([@*])\]", expr)
        if m:
            v = self.vars.get(m.group(1))
            if v is None:
                return []
            return list(v) if isinstance(v, list) else [v]
        m = re.fullmatch(r"#([A-Za-z_][A-Za-z0-9_]*)(\[[@*]\])?", expr)
        if m:
            v = self.vars.get(m.group(1))
            if m.group(2):
                return str(len(v) if isinstance(v, list) else (0 if v is None else 1))
            return str(len(self.get(m.group(1)) or ""))
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[(\d+)\]", expr)
        if m:
            v = self.vars.get(m.group(1))
            k = int(m.group(2))
            if isinstance(v, list):
                return v[k] if k < len(v) else ""
            return (v or "") if k == 0 else ""
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|\d+|[@*#])(:?[-=+?])?(.*)", expr, re.S)
        if not m:
            raise self.err(line, f"cannot read parameter expansion ${{{expr}}}; use $NAME, ${{NAME}} or ${{NAME:-default}}")
        name, op, rest = m.group(1), m.group(2), m.group(3)
        if op is None and rest:
            raise self.err(line, f"cannot read parameter expansion ${{{expr}}} (pattern operations are not supported)")
        val = self.get(name)
        if op is None:
            return val or ""
        unset = val is None or (op.startswith(":") and val == "")
        word = self._expand_text(rest, line)
        if op.endswith("-"):
            return word if unset else val
        if op.endswith("="):
            if unset:
                self.vars[name] = word
                return word
            return val
        if op.endswith("+"):
            return "" if unset else word
        if op.endswith("?"):
            if unset:
                raise self.err(line, f"${{{expr}}}: {name} is not set; set it in the environment")
            return val
        return val or ""

    def _expand_text(self, text: str, line: int) -> str:
        """Expand the word inside ${NAME:-word} (quotes removed, no splitting)."""
        lx = _Lexer(text)
        lx.line = line
        parts: list[Part] = []
        while lx.i < lx.n:
            w = lx._word()
            if not w.parts and lx.i < lx.n:
                parts.append(("lit", lx.t[lx.i], True))
                lx._adv(1)
                continue
            parts.extend((k, t, True) for k, t, _ in w.parts)
        return "".join(self._expand_parts_joined(parts, line))

    def _expand_parts_joined(self, parts: list[Part], line: int) -> list[str]:
        out = []
        for kind, text, _q in parts:
            v = self._part_value(kind, text, line)
            out.append(" ".join(v) if isinstance(v, list) else v)
        return out

    def _part_value(self, kind: str, text: str, line: int) -> list[str] | str:
        if kind == "lit":
            return text
        if kind == "var":
            if text in ("?", "$", "!"):
                return ""  # exit status / pids: nothing ran
            if _NAME.fullmatch(text) or text.isdigit() or text in ("@", "*", "#"):
                return self.get(text) or ""
            return self._param(text, line)
        if kind == "arith":
            try:
                return str(_arith(re.sub(r"\$[?#$!]", "0", text), self.get))
            except (ValueError, SyntaxError, ZeroDivisionError, TypeError) as e:
                raise self.err(line, f"cannot evaluate $(({text})): {e}") from None
        return text  # cmd: never executed; kept as written

    def expand(self, w: Word) -> list[str]:
        """Expand one word to the words bash would produce (unquoted expansions are split on
        whitespace; "${ARR[@]}" gives one word per element)."""
        fields: list[str] = []
        cur: list[str] = []
        have = False  # a current field exists (a quoted empty string counts)

        def close() -> None:
            nonlocal cur, have
            if have or cur:
                fields.append("".join(cur))
            cur, have = [], False

        queue: list[Part] = list(w.parts)
        while queue:
            kind, text, quoted = queue.pop(0)
            if kind == "brk":  # unquoted whitespace inside ${X:-a b}: a field break
                close()
                continue
            if kind == "var" and not quoted:
                inner = self._chosen_word(text, w.line)
                if inner is not None:
                    queue[:0] = inner  # the chosen word is expanded in place, its quotes kept
                    continue
            is_all = kind == "var" and (text == "@" or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\[@\]", text) is not None)
            if is_all:
                items = list(self.args) if text == "@" else self._param(text, w.line)
                assert isinstance(items, list)
                if quoted:
                    for j, item in enumerate(items):
                        if j > 0:
                            close()
                        cur.append(item)
                        have = True
                    continue
                v = " ".join(items)
            else:
                pv = self._part_value(kind, text, w.line)
                v = " ".join(pv) if isinstance(pv, list) else pv
                if quoted or kind in ("lit", "cmd"):  # a command substitution is kept whole, never run
                    cur.append(v)
                    have = True
                    continue
            # unquoted expansion: split on whitespace
            pieces = v.split()
            if v[:1].isspace():
                close()
            for j, piece in enumerate(pieces):
                if j > 0:
                    close()
                cur.append(piece)
                have = True
            if pieces and v[-1:].isspace():
                close()
        close()
        return fields

    def _chosen_word(self, expr: str, line: int) -> list[Part] | None:
        """For ${NAME:-word} / ${NAME:+word} / ${NAME:=word} when the word is chosen: the word's parts
        (quotes kept, unquoted blanks as field breaks). None when the variable's value is used."""
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|\d+)(:?[-=+])(.*)", expr, re.S)
        if not m:
            return None
        name, op, rest = m.groups()
        val = self.get(name)
        unset = val is None or (op.startswith(":") and val == "")
        chosen = (not unset) if op.endswith("+") else unset
        if not chosen:
            return [] if op.endswith("+") else None
        if op.endswith("="):
            self.vars[name] = self._expand_text(rest, line)
            return None
        lx = _Lexer(rest)
        lx.line = line
        out: list[Part] = []
        while True:
            lx._skip_blank(newlines=True)
            if lx.i >= lx.n:
                break
            word = lx._word()
            if not word.parts:  # an operator character: literal text here
                out.append(("lit", lx.t[lx.i], True))
                lx._adv(1)
                continue
            if out:
                out.append(("brk", "", False))
            out.extend(word.parts)
        return out

    def expand_one(self, w: Word) -> str:
        """Expand a word in assignment context (no splitting)."""
        out = []
        for kind, text, _q in w.parts:
            v = self._part_value(kind, text, w.line)
            out.append(" ".join(v) if isinstance(v, list) else v)
        return "".join(out)

    # ---- statements
    def assign(self, w: Word, *, export: bool = False) -> None:
        head = w.parts[0][1] if w.parts and w.parts[0][0] == "lit" and not w.parts[0][2] else ""
        m = _ASSIGN.match(head)
        assert m
        name, idx, op = m.group(1), m.group(2), m.group(3)
        if w.array is not None:
            vals: list[str] = []
            for e in w.array:
                vals.extend(self.expand(e))
            if op == "+=":
                old = self.vars.get(name)
                base = old if isinstance(old, list) else ([old] if old else [])
                vals = list(base) + vals
            self.vars[name] = vals
        else:
            rest = Word([("lit", head[m.end():], False)] + w.parts[1:], w.line)
            val = self.expand_one(rest)
            if idx:
                arr = self.vars.get(name)
                arr = list(arr) if isinstance(arr, list) else ([arr] if arr else [])
                k = int(self.expand_one(Word([("lit", idx[1:-1], False)], w.line)) or 0)
                while len(arr) <= k:
                    arr.append("")
                arr[k] = (arr[k] + val) if op == "+=" else val
                self.vars[name] = arr
            elif op == "+=":
                old = self.vars.get(name)
                if isinstance(old, list):
                    self.vars[name] = old + [val]
                else:
                    self.vars[name] = (old or "") + val
            else:
                self.vars[name] = val
        if export:
            self.exported.add(name)

    def test(self, words: list[str], line: int, double: bool) -> bool:
        """Evaluate the inside of [ ... ] / [[ ... ]] / test."""
        if not words:
            return False
        # || and && (and -o / -a) split first, left to right
        for ops in (("||", "-o"), ("&&", "-a")):
            for k in range(len(words) - 1, -1, -1):
                if words[k] in ops and (double or words[k].startswith("-")):
                    left, right = self.test(words[:k], line, double), self.test(words[k + 1:], line, double)
                    return (left or right) if words[k] in ("||", "-o") else (left and right)
        if words[0] == "!":
            return not self.test(words[1:], line, double)
        if words[0] == "(" and words[-1] == ")":
            return self.test(words[1:-1], line, double)
        if len(words) == 1:
            return words[0] != ""
        if len(words) == 2:
            op, a = words
            if op == "-z":
                return a == ""
            if op == "-n":
                return a != ""
            if op == "-v":
                return a in self.vars
            if op in ("-f", "-e", "-d", "-r", "-x", "-s", "-w"):
                return True  # files are assumed present: the script is read, not run
            raise self.err(line, f"cannot evaluate the test [ {' '.join(words)} ]")
        if len(words) == 3:
            a, op, b = words
            if op in ("=", "=="):
                return fnmatch.fnmatchcase(a, b) if double else a == b
            if op == "!=":
                return not (fnmatch.fnmatchcase(a, b) if double else a == b)
            if op == "=~":
                return re.search(b, a) is not None
            if op in ("-eq", "-ne", "-gt", "-ge", "-lt", "-le"):
                try:
                    x, y = int(a or 0), int(b or 0)
                except ValueError:
                    raise self.err(line, f"[ {a} {op} {b} ]: integer expected; set the variable to a number") from None
                return {"-eq": x == y, "-ne": x != y, "-gt": x > y, "-ge": x >= y, "-lt": x < y, "-le": x <= y}[op]
            if op in ("<", ">"):
                return a < b if op == "<" else a > b
        raise self.err(line, f"cannot evaluate the test [ {' '.join(words)} ]")

    def condition(self, cmds: list[tuple[list[Word], str]], line: int) -> bool:
        """Evaluate an if-condition: simple commands joined by && / ||."""
        result: bool | None = None
        pending = ""
        for words, sep in cmds:
            val = self.one_condition(words, line)
            if result is None:
                result = val
            elif pending == "&&":
                result = result and val
            elif pending == "||":
                result = result or val
            else:
                result = val
            pending = sep
        return bool(result)

    def one_condition(self, words: list[Word], line: int) -> bool:
        neg = False
        if words and words[0].is_unquoted_literal("!"):
            neg, words = True, words[1:]
        if not words:
            raise self.err(line, "empty condition")
        head = words[0].literal()
        if head in ("[", "test", "[["):
            end = {"[": "]", "[[": "]]", "test": None}[head]
            body = words[1:]
            if end:
                if not body or body[-1].literal() != end:
                    raise self.err(line, f"{head} without a closing {end}")
                body = body[:-1]
            vals: list[str] = []
            for w in body:
                if head == "[[":
                    lit = w.literal()
                    vals.append(lit if lit is not None and not any(q for _, _, q in w.parts) else self.expand_one(w))
                else:
                    vals.extend(self.expand(w) if not any(q for _, _, q in w.parts) else [self.expand_one(w)])
            r = self.test(vals, line, head == "[[")
            return r != neg
        if head in ("true", ":"):
            return not neg
        if head == "false":
            return neg
        raise self.err(line, f"cannot evaluate the condition `{' '.join(w.raw for w in words)}`; "
                             "only [ ], [[ ]], test, true and false are read")


def _split_commands(toks: list[Tok]) -> list[tuple[list[Word], str, int]]:
    """Simple commands as (words, separator after it, line)."""
    out: list[tuple[list[Word], str, int]] = []
    cur: list[Word] = []
    line = 1
    for t in toks:
        if t.kind == "word":
            if not cur:
                line = t.line
            cur.append(t.value)  # type: ignore[arg-type]
        else:
            sep = "\n" if t.kind == "nl" else str(t.value)
            if (sep in ("&&", "||") and cur and cur[0].is_unquoted_literal("[[")
                    and not any(w.is_unquoted_literal("]]") for w in cur)):
                cur.append(Word([("lit", sep, False)], t.line))  # && inside [[ ]] is part of the test
                continue
            if cur or sep in ("(", ")"):
                out.append((cur, sep, line if cur else t.line))
            cur = []
    if cur:
        out.append((cur, "\n", line))
    return out


_UNSUPPORTED = ("for", "while", "until", "case", "select", "function", "{", "}")


def interpret_script(text: str, *, path: str = "", env: dict[str, str] | None = None,
                     args: list[str] | None = None) -> ScriptResult:
    """Evaluate a launch script's bash subset; every command it would run, expanded (not executed).

    ``env`` is the starting environment (default: empty, so defaults in the script apply);
    ``args`` are the script's positional arguments ($1, $2, ...)."""
    sbatch = []
    for ln in text.splitlines():
        m = re.match(r"\s*#SBATCH\s+(.*)", ln)
        if m:
            sbatch.extend(shlex.split(m.group(1).split(" #")[0]))
    toks = _Lexer(text, path).tokens()
    cmds = _split_commands(toks)
    it = _Interp(path, env, args)
    # if-stack frames: [active_now, any_branch_taken, parent_active, line of the if]
    stack: list[list] = []
    prev_sep, status = "", True
    exit_line: int | None = None
    k = 0
    while k < len(cmds):
        words, sep, line = cmds[k]
        active = all(f[0] for f in stack)
        if not words:
            if sep in ("(", ")"):
                raise it.err(line, "subshells and functions ( ... ) are not supported; inline the launch command")
            k += 1
            continue
        head = words[0].literal() if words else None
        if head in ("then", "else", "do") and words[0].is_unquoted_literal(head):
            if head == "else":
                if not stack:
                    raise it.err(line, "else without if")
                f = stack[-1]
                f[0] = f[2] and not f[1]
                f[1] = f[1] or f[0]
            words = words[1:]
            if not words:
                k += 1
                continue
            cmds[k] = (words, sep, line)
            continue
        if head in ("if", "elif") and words[0].is_unquoted_literal(head):
            # gather the condition up to `then`
            cond: list[tuple[list[Word], str]] = []
            cur = words[1:]
            j = k
            while True:
                idx = next((p for p, w in enumerate(cur) if w.is_unquoted_literal("then")), None)
                if idx is not None:
                    if cur[:idx]:
                        cond.append((cur[:idx], ""))
                    rest = cur[idx + 1:]
                    break
                cond.append((cur, sep))
                j += 1
                if j >= len(cmds):
                    raise it.err(line, f"{head} without then")
                cur, sep, _ = cmds[j]
                if cur and cur[0].is_unquoted_literal("then"):
                    rest = cur[1:]
                    break
            if head == "if":
                parent = active
                taken = parent and it.condition([(c, s) for c, s in cond], line)
                stack.append([taken, taken, parent, line])
            else:
                if not stack:
                    raise it.err(line, "elif without if")
                f = stack[-1]
                if f[2] and not f[1]:
                    f[0] = it.condition([(c, s) for c, s in cond], line)
                    f[1] = f[0]
                else:
                    f[0] = False
            if rest:
                cmds[j] = (rest, cmds[j][1], cmds[j][2])
                k = j
            else:
                k = j + 1
            continue
        if head == "fi" and words[0].is_unquoted_literal("fi"):
            if not stack:
                raise it.err(line, "fi without if")
            stack.pop()
            k += 1
            continue
        if sep == "(":  # name() { ...: a function definition
            raise it.err(line, "function definitions are not supported by the launch-script reader; "
                               "write the launch without functions")
        if head in _UNSUPPORTED and words[0].is_unquoted_literal(head):
            raise it.err(line, f"`{head}` is not supported by the launch-script reader; "
                               "write the launch without loops, case or functions")
        if not active:
            k += 1
            continue
        # `a && b || c` chains: tests are evaluated, other commands are taken to succeed
        if (prev_sep == "&&" and not status) or (prev_sep == "||" and status):
            prev_sep = sep
            k += 1
            continue
        prev_sep = sep
        if head in ("[", "[[", "test", "true", "false", "!") and words[0].is_unquoted_literal(head):
            status = it.condition([(words, "")], line)
            k += 1
            continue
        status = True
        it_words = words
        if head in ("export", "declare", "local", "readonly", "typeset") and words[0].is_unquoted_literal(head):
            for w in it_words[1:]:
                lit0 = w.parts[0][1] if w.parts and w.parts[0][0] == "lit" and not w.parts[0][2] else ""
                if _ASSIGN.match(lit0):
                    it.assign(w, export=head == "export")
                elif w.literal() and _NAME.fullmatch(w.literal() or ""):
                    if head == "export":
                        it.exported.add(w.literal() or "")
            k += 1
            continue
        # leading assignments
        pre: list[Word] = []
        for w in words:
            lit0 = w.parts[0][1] if w.parts and w.parts[0][0] == "lit" and not w.parts[0][2] else ""
            if _ASSIGN.match(lit0):
                pre.append(w)
            else:
                break
        rest_words = words[len(pre):]
        if not rest_words:
            for w in pre:
                it.assign(w)
            k += 1
            continue
        if any(w.array is not None for w in rest_words):
            raise it.err(line, "an array assignment must stand alone on its line")
        cmd_env = {}
        for w in pre:
            m = _ASSIGN.match(w.parts[0][1])
            assert m
            cmd_env[m.group(1)] = it.expand_one(Word([("lit", w.parts[0][1][m.end():], False)] + w.parts[1:], w.line))
        argv: list[str] = []
        for w in rest_words:
            argv.extend(it.expand(w))
        if argv and argv[0] == "unset":
            for name in argv[1:]:
                it.vars.pop(name, None)
        elif argv and argv[0] == "exit":
            exit_line = line
            stack.clear()  # the script ends here
            break
        elif argv and argv[0] in ("shift",):
            it.args = it.args[int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 1:]
        elif argv:
            it.commands.append(Command(argv=argv, env=cmd_env, line=line))
        k += 1
    if stack:
        raise it.err(stack[-1][3], "if without fi; close it with fi")
    exported = {n: it.get(n) or "" for n in sorted(it.exported)}
    return ScriptResult(commands=it.commands, variables=it.vars, exported=exported, sbatch=sbatch, exit_line=exit_line)


# --------------------------------------------------------------------------- launchers
# torchrun options that take no value; every other option takes one.
_TORCHRUN_FLAGS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "-m", "--module"}
# srun options that take no value (long options take theirs with = or as the next word).
_SRUN_FLAGS = {"-l", "--label", "-u", "--unbuffered", "--exclusive", "--overlap", "-v", "--verbose", "-Q", "--quiet",
               "-K", "--kill-on-bad-exit", "-X", "--disable-status", "-Z", "--no-allocate", "--pty", "--export-file",
               "--mpi-prefix", "--overcommit", "-O", "--whole", "--exact"}
_LAUNCHERS = {"torchrun", "srun"}


@dataclass
class Launch:
    """One launcher command split into its parts. ``launcher`` is the prefix kept verbatim
    (``["torchrun", "--nproc_per_node", "8", ...]``, possibly srun then torchrun); ``program`` is the
    script or ``["-m", "module"]``; ``args`` are the program's arguments."""

    launcher: list[str]
    program: list[str]
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    nproc_per_node: int | None = None
    nnodes: int | None = None
    ntasks: int | None = None  # srun total tasks when srun starts the program itself
    kinds: list[str] = field(default_factory=list)  # launchers in order, e.g. ["srun", "torchrun"]
    line: int | None = None

    @property
    def world_size(self) -> int | None:
        if "torchrun" in self.kinds:
            if self.nproc_per_node:
                return self.nproc_per_node * (self.nnodes or 1)
            return None
        if "srun" in self.kinds:
            if self.ntasks:
                return self.ntasks
            if self.nproc_per_node:
                return self.nproc_per_node * (self.nnodes or 1)
            return None
        return None

    def argv(self, args: list[str] | None = None) -> list[str]:
        return [*self.launcher, *self.program, *(self.args if args is None else args)]


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)(?::(\d+))?\s*", text)
    if not m:
        return None
    return int(m.group(2) or m.group(1))


def _opt(argv: list[str], k: int) -> tuple[str, str | None, int]:
    """(name, value or None, next index) for an option at argv[k] that takes a value."""
    a = argv[k]
    if a.startswith("--") and "=" in a:
        n, v = a.split("=", 1)
        return n, v, k + 1
    if len(a) > 2 and a[0] == "-" and a[1] != "-":  # -N2
        return a[:2], a[2:], k + 1
    return a, (argv[k + 1] if k + 1 < len(argv) else None), k + 2


def _launcher_options(argv: list[str], k: int, launcher: list[str], bare: Collection[str],
                      stop: Collection[str] = ()) -> tuple[list[tuple[str, str | None]], int]:
    """Consume a launcher's options from argv[k] (up to its first non-option word, or a word in ``stop``),
    copying them into ``launcher``: flags in ``bare`` take no value. Returns the valued options as
    (name, value) pairs and the index after the last option."""
    opts = []
    while k < len(argv) and argv[k].startswith("-") and argv[k] not in stop:
        if argv[k] in bare:
            launcher.append(argv[k])
            k += 1
            continue
        name, val, k2 = _opt(argv, k)
        launcher.extend(argv[k:k2])
        opts.append((name, val))
        k = k2
    return opts, k


def is_python(word: str) -> bool:
    return re.fullmatch(r"python(\d(\.\d+)?)?", os.path.basename(word)) is not None


def split_launcher(argv: list[str], *, env: dict[str, str] | None = None, sbatch: list[str] | None = None,
                   line: int | None = None) -> Launch:
    """Split an expanded command into launcher prefix, program and program arguments.

    Understands ``torchrun``, ``python -m torch.distributed.run``/``launch``, ``srun`` (also around
    torchrun or python), and a bare ``python script.py`` / ``python -m module``. ``sbatch`` directive
    arguments supply srun's node/task counts when srun does not state them."""
    out = Launch(launcher=[], program=[], args=[], env=dict(env or {}), line=line)
    k = 0
    n = len(argv)
    srun_nodes = srun_tpn = None
    # #SBATCH defaults
    if sbatch:
        j = 0
        while j < len(sbatch):
            if sbatch[j].startswith("-"):
                name, val, j2 = _opt(sbatch, j)
                if name in ("-N", "--nodes"):
                    srun_nodes = _int(val)
                elif name == "--ntasks-per-node":
                    srun_tpn = _int(val)
                j = j2
            else:
                j += 1
    while k < n:
        w = argv[k]
        base = os.path.basename(w)
        if base == "env" and not out.kinds:
            out.launcher.append(w)
            k += 1
            while k < n and re.match(r"[A-Za-z_]\w*=", argv[k]):
                name, val = argv[k].split("=", 1)
                out.env[name] = val
                out.launcher.append(argv[k])
                k += 1
            continue
        if base == "srun":
            out.kinds.append("srun")
            out.launcher.append(w)
            k += 1
            ntasks = None
            opts, k = _launcher_options(argv, k, out.launcher, _SRUN_FLAGS)
            for name, val in opts:
                if name in ("-N", "--nodes"):
                    srun_nodes = _int(val)
                elif name == "--ntasks-per-node":
                    srun_tpn = _int(val)
                elif name in ("-n", "--ntasks"):
                    ntasks = _int(val)
            out.nnodes = srun_nodes
            out.nproc_per_node = srun_tpn
            out.ntasks = ntasks if ntasks else ((srun_tpn or 0) * (srun_nodes or 1) or None)
            continue
        if base == "torchrun" or (is_python(w) and argv[k + 1:k + 3] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"])):
            out.kinds.append("torchrun")
            if base == "torchrun":
                out.launcher.append(w)
                k += 1
            else:
                out.launcher.extend(argv[k:k + 3])
                k += 3
            nnodes_from_srun = out.nnodes
            opts, k = _launcher_options(argv, k, out.launcher, _TORCHRUN_FLAGS, stop=("-m", "--module"))
            for name, val in opts:
                if name in ("--nproc_per_node", "--nproc-per-node"):
                    out.nproc_per_node = _int(val)
                elif name == "--nnodes":
                    out.nnodes = _int(val)
            if out.nnodes is None:
                out.nnodes = nnodes_from_srun
            out.ntasks = None
            if k < n and argv[k] in ("-m", "--module"):
                out.program = argv[k:k + 2]
                out.args = argv[k + 2:]
            else:
                out.program = argv[k:k + 1]
                out.args = argv[k + 1:]
            return out
        if is_python(w):
            out.kinds.append("python")
            out.launcher.append(w)
            k += 1
            while k < n and argv[k].startswith("-") and argv[k] not in ("-m",):
                out.launcher.append(argv[k])
                k += 1
            if k < n and argv[k] == "-m":
                out.program = argv[k:k + 2]
                out.args = argv[k + 2:]
            else:
                out.program = argv[k:k + 1]
                out.args = argv[k + 1:]
            return out
        if out.kinds:  # srun then a program that is not python/torchrun
            out.program = [w]
            out.args = argv[k + 1:]
            return out
        break
    if not out.program:
        out.program = argv[k:k + 1]
        out.args = argv[k + 1:]
    return out


def world_from_variables(variables: dict[str, str | list[str]]) -> int | None:
    """World size from the variables launch scripts conventionally set (WORLD_SIZE, or
    GPUS_PER_NODE x NUM_NODES/NNODES), when they are plain numbers."""

    def num(name: str) -> int | None:
        v = variables.get(name)
        return int(v) if isinstance(v, str) and v.strip().isdigit() else None

    ws = num("WORLD_SIZE")
    if ws:
        return ws
    gpn = next((num(x) for x in ("GPUS_PER_NODE", "NPROC_PER_NODE", "NGPU", "NUM_GPUS") if num(x)), None)
    nodes = next((num(x) for x in ("NUM_NODES", "NNODES", "NODES", "N_NODES") if num(x)), None)
    if gpn:
        return gpn * (nodes or 1)
    return None


def shell_join(argv: list[str], env: dict[str, str] | None = None) -> str:
    """A command line a shell reads back as ``argv`` (with ``env`` assignments first)."""
    pre = [f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    return " ".join(pre + [shlex.quote(a) for a in argv])
