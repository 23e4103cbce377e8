"""The launch-script reader: a subset of bash evaluated the way bash would, without running anything.

Training launches are usually bash scripts in the style of Megatron-LM's ``examples/``: variables
with defaults (``TP=${TP:-1}``), arithmetic (``WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))``), bash
arrays (``GPT_MODEL_ARGS=( --num-layers 96 ... )``, ``ARGS+=(...)``), ``if [ ... ]`` branches, line
continuations, and finally ``torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${GPT_MODEL_ARGS[@]} ...``.

:func:`interpret_script` evaluates that subset (word splitting of unquoted expansions included) and
returns every command it would run, expanded, with its line number. Commands are never executed:
a ``$(...)`` or backtick substitution stays as its literal text and is one word wherever it goes (it
is never split on its inner blanks), file tests (``[ -f x ]``) are taken as true, ``$PWD`` is the
directory the script is read for. A construct outside the subset (loops, functions, ``case``) or a
condition it cannot evaluate raises :class:`ScriptError` naming the line. The lexer is
:mod:`.bash_lex`, the evaluator of one command's words (expansions, assignments, conditions)
:mod:`.bash_eval`; this module walks the commands (``if`` branches, ``exit``, ``shift``, ``export``).
"""


from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from .bash_eval import Command, Interpreter
from .bash_lex import _ASSIGN, _NAME, ScriptError, Tok, Word, _Lexer
from .placed import Placed, assigned, part_of

__all__ = ["Command", "ScriptError", "ScriptResult", "interpret_script", "sbatch_directives"]


@dataclass
class ScriptResult:
    commands: list[Command]
    variables: dict[str, str | list[str]]
    exported: dict[str, str]  # variables the script exports (their final values)
    sbatch: list[str] = field(default_factory=list)  # #SBATCH directive arguments, in order
    exit_line: int | None = None  # where the script exits (an `exit` it reaches), if it does
    environ: dict[str, str] = field(default_factory=dict)  # the starting environment's names, final values


def sbatch_directives(text: str) -> list[str]:
    """The ``#SBATCH`` directive arguments of a batch script, in order (a trailing `` #`` comment dropped)."""
    out: list[str] = []
    for ln in text.splitlines():
        m = re.match(r"\s*#SBATCH\s+(.*)", ln)
        if m:
            out.extend(shlex.split(m.group(1).split(" #")[0]))
    return out


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
                     args: list[str] | None = None, cwd: str | None = None,
                     include: Callable[[str], tuple[str, str] | None] | None = None,
                     base: int | Placed | None = 0) -> ScriptResult:
    """Evaluate a launch script's bash subset; every command it would run, expanded (not executed).

    ``env`` is the starting environment (default: empty, so defaults in the script apply);
    ``args`` are the script's positional arguments ($1, $2, ...); ``cwd`` is the directory the script
    runs from: ``$PWD`` unless ``env`` sets it (default: this process's working directory).
    ``include`` reads a ``source FILE`` / ``. FILE``: the file's (path, text), or None when it is not read (the
    command is then kept as it is); a read file's commands run in this script, as bash runs them, and each
    :class:`Command` names the file it stands in (``path``). ``base``: where ``text`` stands in the file ``path``
    (its offset, or the word a ``bash -c`` string was read as; None: not written there as it is): the words read
    are placed there (:mod:`.placed`)."""
    sbatch = sbatch_directives(text)
    toks = _Lexer(text, path, base).tokens()
    cmds = _split_commands(toks)
    where = [path] * len(cmds)  # the file each command stands in (a sourced file's commands are spliced in)
    included = 0
    start_env = dict(env or {})
    start_env.setdefault("PWD", str(cwd) if cwd is not None else os.getcwd())
    it = Interpreter(path, start_env, args)
    for name, val in start_env.items():  # a parent script's `export X=$(cmd)`: one word, never run, as in its parent
        if "$(" in val or "`" in val:
            it.vars[name] = it.opaque(val)
    # if-stack frames: [active_now, any_branch_taken, parent_active, line of the if]
    stack: list[list] = []
    prev_sep, status = "", True
    exit_line: int | None = None
    k = 0
    while k < len(cmds):
        words, sep, line = cmds[k]
        it.where = where[k]
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
            head = w.parts[0][1]
            cmd_env[m.group(1)] = assigned(it.expand_one(Word([("lit", part_of(head, m.end(), len(head) - m.end()), False)]
                                                              + w.parts[1:], w.line)), m.group(1))
        argv: list[str] = []
        for w in rest_words:
            argv.extend(it.expand(w))
        ends = bool(argv) and argv[0] == "exec" and len(argv) > 1  # `exec torchrun ...`: it replaces the script
        if ends:
            argv = argv[1:]
        if argv and argv[0] == "unset":
            for name in argv[1:]:
                it.vars.pop(name, None)
        elif argv and argv[0] == "exit":
            exit_line = line
            stack.clear()  # the script ends here
            break
        elif argv and argv[0] in ("shift",):
            it.args = it.args[int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 1:]
        elif argv and argv[0] in ("source", ".") and len(argv) > 1 and include is not None \
                and (got := include(_reveal(argv[1], it.substitutions))) is not None:
            included += 1
            if included > 32:  # a file that sources itself, directly or not
                raise it.err(line, f"more than 32 files sourced (is {got[0]} sourcing itself?); source each file once")
            more = _split_commands(_Lexer(got[1], got[0], 0).tokens())
            cmds[k + 1:k + 1] = more
            where[k + 1:k + 1] = [got[0]] * len(more)
        elif argv:
            it.commands.append(Command(argv=argv, env=cmd_env, line=line, path=where[k]))
        if ends:
            stack.clear()  # nothing after it runs
            break
        k += 1
    if stack:
        raise it.err(stack[-1][3], "if without fi; close it with fi")
    exported = {n: it.get(n) or "" for n in sorted(it.exported)}

    def reveal(v):
        return _reveal(v, it.substitutions)

    commands = [Command(argv=reveal(c.argv), env=reveal(c.env), line=c.line, path=c.path) for c in it.commands]
    environ = {n: v for n in (env or {}) if isinstance(v := it.vars.get(n), str)}
    return ScriptResult(commands=commands, variables=reveal(it.vars), exported=reveal(exported), sbatch=sbatch,
                        exit_line=exit_line, environ=reveal(environ))


_PLACEHOLDER = re.compile("\x00(\\d+)\x00")


def _reveal(v, subs: list[str]):
    """``v`` (a string, list or dict of them) with command-substitution placeholders replaced by their text."""
    if isinstance(v, str):
        return _PLACEHOLDER.sub(lambda m: subs[int(m.group(1))], v) if "\x00" in v else v
    if isinstance(v, list):
        return [_reveal(x, subs) for x in v]
    if isinstance(v, dict):
        return {k: _reveal(x, subs) for k, x in v.items()}
    return v
