"""The evaluator of the launch-script reader: one simple command's words expanded the way bash would.

Variables and positional parameters, ``${...}`` parameter expansion (defaults, alternatives, lengths,
substrings, patterns), arithmetic, arrays, assignments and the ``[ ]`` / ``[[ ]]`` / ``test`` conditions.
Command substitutions are never run: each becomes a placeholder without blanks (:meth:`Interpreter.opaque`),
which :mod:`.bash` turns back into its text at the end. Control flow (``if``, ``exit``, ``shift``) is
:func:`.bash.interpret_script`'s.
"""

from __future__ import annotations

import ast
import fnmatch
import operator
import re
from dataclasses import dataclass

from .bash_lex import _ASSIGN, _NAME, Part, ScriptError, Word, _Lexer
from .placed import assigned, at_of, joined, part_of, split_placed, with_site


@dataclass
class Command:
    """One simple command as bash would run it: expanded argv, assignments before it, its line."""

    argv: list[str]
    env: dict[str, str]
    line: int
    path: str = ""  # the file it stands in (a sourced file's, or the script's own)


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


def _inner_at(expr: str, offset: int) -> tuple[str, int] | None:
    """(file, offset) of ``expr[offset:]`` when ``expr`` (a ``${...}``'s text) is placed."""
    a = at_of(expr)
    return None if a is None else (a.path, a.start + offset)


class Interpreter:
    """The state of one script being read: its variables, exports, positional arguments and commands."""

    def __init__(self, path: str, env: dict[str, str] | None, args: list[str] | None) -> None:
        self.path = path
        self.where = path  # the file of the command being read (a sourced one's): what errors name
        self.vars: dict[str, str | list[str]] = dict(env or {})
        self.exported: set[str] = set()
        self.args = list(args or [])
        self.commands: list[Command] = []
        self.substitutions: list[str] = []  # command substitutions met, by placeholder number

    def opaque(self, text: str) -> str:
        """A placeholder for a command substitution that is never run: it has no blanks, so word splitting
        keeps it whole wherever it travels (a variable, an array, an option value); :func:`.bash._reveal` puts
        the text back."""
        self.substitutions.append(text)
        return f"\x00{len(self.substitutions) - 1}\x00"

    def err(self, line: int, msg: str) -> ScriptError:
        return ScriptError(line, msg, path=self.where)

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
        word = self._expand_text(rest, line, _inner_at(expr, m.start(3)))
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

    def _expand_text(self, text: str, line: int, at: tuple[str, int] | None = None) -> str:
        """Expand the word inside ${NAME:-word} (quotes removed, no splitting); ``at``: (file, offset) of ``text``."""
        lx = _Lexer(text, *(at or ("", None)), inner=True)
        lx.line = line
        parts: list[Part] = []
        while lx.i < lx.n:
            w = lx._word()
            if not w.parts and lx.i < lx.n:
                parts.append(("lit", lx.t[lx.i], True))
                lx._adv(1)
                continue
            parts.extend((k, t, True) for k, t, _ in w.parts)
        return joined(self._expand_parts_joined(parts, line))

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
        return self.opaque(text)  # cmd: never executed; kept as written, as one word

    def expand(self, w: Word) -> list[str]:
        """Expand one word to the words bash would produce (unquoted expansions are split on
        whitespace; "${ARR[@]}" gives one word per element)."""
        fields: list[str] = []
        cur: list[str] = []
        have = False  # a current field exists (a quoted empty string counts)

        def close() -> None:
            nonlocal cur, have
            if have or cur:
                fields.append(joined(cur))  # placed where its pieces were read, when they are one span
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
                pieces = [p for item in items for p in split_placed(item)]
            else:
                pv = self._part_value(kind, text, w.line)
                v = " ".join(pv) if isinstance(pv, list) else pv
                if quoted or kind in ("lit", "cmd"):  # a command substitution is kept whole, never run
                    cur.append(v)
                    have = True
                    continue
                pieces = split_placed(v)
            # unquoted expansion: split on whitespace
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
        if len(fields) == 1 and len(w.parts) == 1 and w.parts[0][0] == "var":  # $TP, "${TP}": the word it came from
            fields = [with_site(fields[0], w.at)]
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
            self.vars[name] = self._expand_text(rest, line, _inner_at(expr, m.start(3)))
            return None
        lx = _Lexer(rest, *(_inner_at(expr, m.start(3)) or ("", None)), inner=True)
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
        return joined(out)

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
            rest = Word([("lit", part_of(head, m.end(), len(head) - m.end()), False)] + w.parts[1:], w.line)
            val = assigned(self.expand_one(rest), name)
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
