"""infrarsi.errors.explain: a known failure anywhere in the chain is one line; an unknown one is not explained."""

from __future__ import annotations

import errno

from infrarsi.errors import RecordError, explain, read_json_record


def _chained_enospc(path):
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(path.with_name(f".{path.name}.123.456.tmp")))
        except OSError as e:
            raise RuntimeError("while recording the trial") from e
    except RuntimeError as e:
        try:
            raise ValueError("while finishing the batch") from e
        except ValueError as outer:
            return outer


def test_a_full_disk_deep_in_the_chain_names_the_record_and_the_mount(tmp_path):
    line = explain(_chained_enospc(tmp_path / "trial.json"), ["run", "--run-dir", "r", "--debug"])
    assert "\n" not in line and f"writing {tmp_path / 'trial.json'}" in line and "ENOSPC" in line
    assert "free space on /" in line and line.endswith("then rerun `infrarsi run --run-dir r`")


def test_unknown_failures_keep_their_traceback():
    assert explain(ZeroDivisionError("x")) is None
    assert explain(OSError(errno.ENOENT, "No such file")) is None


def test_records_that_exist_but_do_not_parse_are_refused(tmp_path):
    p = tmp_path / "search.json"
    assert read_json_record(p) is None
    for bad in (b'{"proposals": {"1": ', b"\xff\xfe\x00", b"[1, 2]"):
        p.write_bytes(bad)
        try:
            read_json_record(p)
        except RecordError as e:
            assert str(p) in str(e) and "left untouched" in str(e) and "\n" not in str(e)
        else:
            raise AssertionError(f"{bad!r} was read as a record")
        assert p.read_bytes() == bad
