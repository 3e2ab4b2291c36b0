import signal
import subprocess
import sys
import textwrap
import time

import pytest

from solm.core.errors import DataError
from solm.core.jsonl import JsonlWriter, done_ids, read_jsonl


def test_malformed_line_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"id": 1}\n\n{"id": 2}\n{"id": 3,,}\n')
    with pytest.raises(DataError) as e:
        list(read_jsonl(p))
    assert e.value.line == 4 and str(p) in str(e.value) and ":4" in str(e.value)


def test_non_object_line_is_an_error(tmp_path):
    p = tmp_path / "list.jsonl"
    p.write_text('{"id": 1}\n[1, 2]\n')
    with pytest.raises(DataError, match=":2"):
        list(read_jsonl(p))


def test_missing_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="not found"):
        list(read_jsonl(tmp_path / "nope.jsonl"))


def test_writer_appends_and_resume_skips_done(tmp_path):
    p = tmp_path / "out.jsonl"
    with JsonlWriter(p) as w:
        w.write({"id": "a"})
    with JsonlWriter(p) as w:
        w.write({"id": "b"})
    assert [r["id"] for r in read_jsonl(p)] == ["a", "b"]
    assert done_ids(p, tmp_path / "missing.jsonl") == {"a", "b"}


def test_killed_writer_loses_at_most_the_record_in_flight(tmp_path):
    """A writer process killed mid-run; a rerun resumes and ends with every id exactly once."""
    out = tmp_path / "out.jsonl"
    script = textwrap.dedent(f"""
        import sys, time
        from solm.core.jsonl import JsonlWriter, done_ids
        seen = done_ids({str(out)!r})
        with JsonlWriter({str(out)!r}) as w:
            for i in range(200):
                if str(i) in seen:
                    continue
                w.write({{"id": str(i), "payload": "x" * 1000}})
                if len(sys.argv) > 1:
                    time.sleep(0.01)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script, "slow"])
    # kill it once it has written a few records (its start-up alone can take seconds on a
    # busy machine), long before its 200 x 10 ms
    while proc.poll() is None and (not out.exists() or out.read_text().count("\n") < 5):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # simulate a half-written record as well
    with open(out, "a") as f:
        f.write('{"id": "partial", "payl')
    first = done_ids(out)
    assert 0 < len(first) < 200 and "partial" not in first
    subprocess.run([sys.executable, "-c", script], check=True)
    ids = [r["id"] for r in read_jsonl(out)]
    assert sorted(ids, key=int) == [str(i) for i in range(200)]
    assert len(ids) == len(set(ids))


def test_a_leading_byte_order_mark_is_read_as_nothing(tmp_path):
    """Editors on Windows write a UTF-8 BOM first: the file's rows are the same rows."""
    from solm.core.jsonl import read_rows_located
    from solm.core.records import load_records

    plain = '{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y"}\n'
    path = tmp_path / "bom.jsonl"
    path.write_bytes("\ufeff".encode("utf-8") + plain.encode("utf-8"))
    assert list(read_jsonl(path)) == [{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y"}]
    assert [r.id for r in load_records(path)] == ["a", "b"]
    listed = tmp_path / "bom.json"
    listed.write_bytes(b"\xef\xbb\xbf" + b'[{"id": "c"}]')
    assert [row for _, row in read_rows_located(listed)] == [{"id": "c"}]
    # a BOM elsewhere than the file's start is still not JSON
    path.write_bytes(plain.encode("utf-8") + b"\xef\xbb\xbf{}\n")
    with pytest.raises(DataError, match=":3"):
        list(read_jsonl(path))
