"""Minimal edits of a TOML job file: change, add or remove ``section.field`` values, keeping everything else.

A user reviews a diff of their own job file, so an edit touches only the value it changes: comments
(the one after the value included), blank lines, key order and quoting style of untouched lines stay
byte for byte. A value on a ``[section]`` line's table is replaced in place (a multi-line array
included); a missing key is added after the table's last key; a missing table is appended at the
end. ``None`` removes the key. The result is parsed back and must hold exactly the requested values,
else :class:`TomlEditError`.

    set_values(text, {"parallelism.tensor_parallel_degree": 4, "model.converters": []})
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from typing import Any

_TABLE = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
_KEY = re.compile(r"^(\s*)([A-Za-z0-9_-]+|\"[^\"]+\")(\s*=\s*)")


class TomlEditError(ValueError):
    """An edit that cannot be made as a minimal change (names the key)."""


def render(value: Any) -> str:
    """``value`` as a TOML value (bool, int, float, str, list of those)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(render(v) for v in value) + "]"
    raise TomlEditError(f"cannot write {value!r} ({type(value).__name__}) as a TOML value")


def _value_end(lines: list[str], i: int, start: int) -> tuple[int, int]:
    """(line, column) just after the value that begins at lines[i][start:] (arrays may span lines)."""
    depth, quote = 0, None
    j, k = i, start
    while j < len(lines):
        s = lines[j]
        while k < len(s):
            c = s[k]
            if quote:
                if c == "\\" and quote == '"':
                    k += 2
                    continue
                if c == quote:
                    quote = None
            elif c in "\"'":
                quote = c
            elif c == "[":
                depth += 1
            elif c == "]":
                depth -= 1
                if depth == 0:
                    return j, k + 1
            elif c == "#" and depth == 0:
                return j, len(s[:k].rstrip())
            elif depth == 0 and c in " \t" and k > start:
                rest = s[k:].strip()
                if not rest or rest.startswith("#"):
                    return j, k
            k += 1
        if depth == 0:
            return j, len(s.rstrip())
        j, k = j + 1, 0
    raise TomlEditError(f"line {i + 1}: the array is never closed")


def _tables(lines: list[str]) -> dict[str, tuple[int, int]]:
    """table name -> (header line, last line that belongs to it) ("" is the top level before any table)."""
    heads = [(i, m.group(1).strip()) for i, ln in enumerate(lines) if (m := _TABLE.match(ln))]
    out: dict[str, tuple[int, int]] = {}
    bounds = [(-1, "")] + heads
    for n, (i, name) in enumerate(bounds):
        end = (bounds[n + 1][0] - 1) if n + 1 < len(bounds) else len(lines) - 1
        out[name] = (i, end)
    return out


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def set_values(text: str, values: Mapping[str, Any], *, path: str = "<toml>") -> str:
    """``text`` with each ``"section.field": value`` set (None: removed); every other byte kept."""
    lines = text.split("\n")
    for dotted, value in values.items():
        if "." not in dotted:
            raise TomlEditError(f"{path}: {dotted!r} names no table; write section.field")
        table, key = dotted.rsplit(".", 1)
        tables = _tables(lines)
        if table not in tables:
            if value is None:
                continue
            if lines and lines[-1] == "":
                lines[-1:] = ["", f"[{table}]", f"{key} = {render(value)}", ""]
            else:
                lines += ["", f"[{table}]", f"{key} = {render(value)}"]
            continue
        head, end = tables[table]
        found = None
        last_key = head
        i = head + 1
        while i <= end:
            m = _KEY.match(lines[i])
            if m:
                j, col = _value_end(lines, i, m.end())
                if m.group(2).strip('"') == key:
                    found = (i, m, j, col)
                    break
                last_key = j
                i = j + 1
                continue
            i += 1
        if found is None:
            if value is not None:
                lines.insert(last_key + 1, f"{key} = {render(value)}")
            continue
        i, m, j, col = found
        if value is None:
            del lines[i:j + 1]
            continue
        tail = lines[j][col:]
        lines[i:j + 1] = [lines[i][:m.end()] + render(value) + tail]
    out = "\n".join(lines)
    try:
        got = _flatten(tomllib.loads(out))
    except tomllib.TOMLDecodeError as e:
        raise TomlEditError(f"{path}: the edit would not be valid TOML ({e})") from None
    for dotted, value in values.items():
        if got.get(dotted) != (list(value) if isinstance(value, tuple) else value):
            raise TomlEditError(f"{path}: {dotted} reads back as {got.get(dotted)!r}, not {value!r}")
    return out
