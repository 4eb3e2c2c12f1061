"""The safety checker's self-test: planted histories with a known overlap, a known stale write, a
fence inversion, and a clean one (no servers; the recorder's files are real)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from fastredlock.testing import (
    HistoryRecorder,
    Op,
    ResourceWrite,
    check_history,
    load_history,
    stale_writes,
)


def acquire(process, index, start, valid_until, *, fence=None, token=None, name="L"):
    return Op(process, index, "acquire", start - 0.01, start, "ok", name=name, token=token or f"{process}-{index}",
              fence=fence, valid_until=valid_until)


def release(process, index, hold, at, result="ok"):
    return Op(process, index, "release", at, at + 0.005, result, name="L", hold=hold)


def write(seq, process, op, hold, fence=None, accepted=True, token=None):
    return ResourceWrite(seq, "L", process, op, hold, token or f"{process}-{hold}", fence, accepted)


def clean_history():
    """a holds [1, 2), b holds [2.1, 3): one after the other, fences increasing."""
    ops = [acquire("a", 0, 1.0, 2.5, fence=1), release("a", 3, 0, 2.0),
           acquire("b", 0, 2.1, 4.0, fence=2), release("b", 3, 0, 3.0)]
    writes = [write(0, "a", 1, 0, 1), write(1, "a", 2, 0, 1), write(2, "b", 1, 0, 2), write(3, "b", 2, 0, 2)]
    return ops, writes


def test_clean_history_passes():
    result = check_history(*clean_history())
    assert result.ok, result
    s = result.summary()
    assert (s["held_overlaps"], s["use_overlaps"], s["stale_accepted"], s["stale_unchecked"],
            s["fence_inversions"]) == (0, 0, 0, 0, 0)
    assert s["acquired"] == 2 and s["operations"] == 4


def test_planted_overlap_is_detected():
    # b acquires at 1.5 while a believes it holds until its release at 2.0 (validity to 2.5)
    ops = [acquire("a", 0, 1.0, 2.5), release("a", 1, 0, 2.0), acquire("b", 0, 1.5, 3.5), release("b", 1, 0, 3.0)]
    result = check_history(ops)
    assert not result.ok
    assert [(x.process, y.process) for x, y in result.held_overlaps] == [("a", "b")]


def test_validity_end_bounds_a_hold():
    # a's release comes late (3.0), but its validity ended at 1.4: b at 1.5 is not an overlap
    ops = [acquire("a", 0, 1.0, 1.4), release("a", 1, 0, 3.0, "fail"), acquire("b", 0, 1.5, 3.5)]
    assert check_history(ops).held_overlaps == []


def test_other_lock_names_do_not_overlap():
    ops = [acquire("a", 0, 1.0, 2.5), acquire("b", 0, 1.5, 3.5, name="M")]
    assert check_history(ops).ok


def test_planted_stale_write_is_detected_and_caught():
    # a (fence 1) was paused between its writes; b (fence 2) wrote meanwhile; a's late write:
    ops, _ = clean_history()
    accepted_late = [write(0, "a", 1, 0, 1), write(1, "b", 1, 0, 2), write(2, "a", 2, 0, 1),
                     write(3, "b", 2, 0, 2)]
    result = check_history(ops, accepted_late)  # a resource without a fence check took it
    assert [(w.process, w.seq) for w in result.stale_accepted] == [("a", 2)]
    assert [(u, v) for u, v in result.use_overlaps] == [("a:0", "b:0")]
    assert not result.ok

    refused_late = [write(0, "a", 1, 0, 1), write(1, "b", 1, 0, 2), write(2, "a", 2, 0, 1, accepted=False),
                    write(3, "b", 2, 0, 2)]
    result = check_history(ops, refused_late)  # the fence check refused it
    assert result.stale_accepted == [] and result.use_overlaps == []
    assert [(w.process, w.seq) for w in result.stale_unchecked] == [("a", 2)]  # what the check caught
    assert result.ok


def test_equal_fence_from_another_holder_is_stale():
    writes = [write(0, "a", 1, 0, 5), write(1, "b", 1, 0, 5)]
    assert [w.process for w in stale_writes(writes)] == ["b"]
    assert stale_writes([write(0, "a", 1, 0, 5), write(1, "a", 2, 0, 5)]) == []  # the same holder again


def test_planted_fence_inversion_is_detected():
    ops = [acquire("a", 0, 1.0, 2.5, fence=7), release("a", 1, 0, 2.0),
           acquire("b", 0, 2.1, 4.0, fence=3), release("b", 1, 0, 3.0)]
    result = check_history(ops)
    assert [(x.process, y.process) for x, y in result.fence_inversions] == [("a", "b")]
    assert not result.ok


def test_recorder_round_trip_and_unknown_for_a_killed_process(tmp_path):
    path = tmp_path / "h.jsonl"
    # A real process records an acquire, invokes a release and is killed (SIGKILL) before completing it.
    code = f"""
import os, signal, time
from fastredlock.testing import HistoryRecorder
rec = HistoryRecorder({str(path)!r}, "p1")
a = rec.invoke("acquire", name="L")
rec.complete(a, "ok", token="t", fence=4, valid_until=time.monotonic() + 1.0)
rec.invoke("release", name="L", hold=a.index)
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    with HistoryRecorder(path, "p2") as rec:
        rec.complete(rec.invoke("write", hold=0, fence=4), "ok", accepted=True, seq=0)
    with open(path, "ab") as f:
        f.write(b'{"type":"invoke","proc')  # a torn last line is skipped
    ops = {o.key: o for o in load_history(str(tmp_path))}
    assert ops["p1:0"].result == "ok" and ops["p1:0"].fence == 4 and ops["p1:0"].complete >= ops["p1:0"].invoke
    assert ops["p1:1"].kind == "release" and ops["p1:1"].result == "unknown" and ops["p1:1"].complete is None
    assert ops["p2:0"].accepted is True and ops["p2:0"].seq == 0
    holds = check_history(ops.values()).holds
    assert len(holds) == 1 and holds[0].end == ops["p1:1"].invoke  # the unknown release still ends the belief
    json.dumps(check_history(ops.values()).to_dict())  # the report is JSON-ready


def test_op_refuses_an_unknown_result():
    with pytest.raises(ValueError, match="result"):
        Op("a", 0, "acquire", 1.0, 2.0, "maybe")


def test_late_writes_and_a_refused_current_holder_are_told_apart():
    # a (fence 5) writes, b (fence 6, began later) writes, a writes late: refused (caught).
    # Then c (began last) got fence 2, counters forgotten: its write is refused although it is current.
    ops = [acquire("a", 0, 1.0, 9.0, fence=5), acquire("b", 0, 2.0, 9.0, fence=6),
           acquire("c", 0, 3.0, 9.0, fence=2)]
    writes = [write(0, "a", 1, 0, 5), write(1, "b", 1, 0, 6), write(2, "a", 2, 0, 5, accepted=False),
              write(3, "c", 1, 0, 2, accepted=False)]
    result = check_history(ops, writes)
    assert [(w.process, w.seq) for w in result.late_refused] == [("a", 2)]
    assert result.late_accepted == [] and result.refused_current == 1
    assert [(w.process, w.seq) for w in result.stale_unchecked] == [("a", 2), ("c", 3)]


def test_the_resource_log_is_rebuilt_from_the_history():
    ops = [acquire("a", 0, 1.0, 9.0, fence=5),
           Op("a", 1, "write", 1.1, 1.2, "ok", name="L", hold=0, token="a-0", fence=5, accepted=True, seq=0),
           acquire("b", 0, 2.0, 9.0, fence=6),
           Op("b", 1, "write", 2.1, 2.2, "ok", name="L", hold=0, token="b-0", fence=6, accepted=True, seq=1),
           Op("a", 2, "write", 3.1, 3.2, "ok", name="L", hold=0, token="a-0", fence=5, accepted=True, seq=2),
           Op("a", 3, "write", 3.3, None, "unknown", name="L", hold=0, token="a-0", fence=5)]
    result = check_history(ops)  # no log given: the write ops are the log (the unknown one left out)
    assert result.writes == 3
    assert [(w.process, w.seq) for w in result.stale_accepted] == [("a", 2)]
    assert [(w.process, w.seq) for w in result.late_accepted] == [("a", 2)]
    assert result.use_overlaps == [("a:0", "b:0")]


def test_recheck_rewrites_a_saved_run_from_its_histories(tmp_path):
    # A saved run (as the command writes it) whose history holds a planted overlap in the control mode.
    from fastredlock.testing.safety import main

    run = tmp_path / "restart" / "history"
    run.mkdir(parents=True)
    rec = HistoryRecorder(run / "unsafe-c0.1.jsonl", "unsafe/c0.1")
    other = HistoryRecorder(run / "unsafe-c1.1.jsonl", "unsafe/c1.1")
    for r in (rec, other):
        p = r.invoke("acquire", name="safety:unsafe")
        r.complete(p, "ok", token=r.process, valid_until=1e12)  # both believe they hold it: an overlap
    saved = {"command": "python -m fastredlock.testing.safety --scenario restart",
             "reports": [{"scenario": "restart", "fault": "planted", "seconds": 1.0, "ttl": 2.0,
                          "nemesis": {"strikes": 1}, "modes": {"unsafe": {}}}]}
    (tmp_path / "report.json").write_text(json.dumps(saved))
    assert main(["--out", str(tmp_path), "--recheck"]) == 0  # the control saw its overlap: as expected
    report = json.loads((tmp_path / "report.json").read_text())["reports"][0]["modes"]["unsafe"]
    assert report["held_overlaps"] == 1 and report["expected"], report
    table = (tmp_path / "report.md").read_text()
    assert "| restart | unsafe | 2 / 2 | 1 |" in table and "--scenario restart --seconds 1" in table


def test_recheck_fails_a_run_whose_defaults_overlapped(tmp_path):
    from fastredlock.testing.safety import main

    run = tmp_path / "partition-minority" / "history"
    run.mkdir(parents=True)
    for process in ("defaults/c0.1", "defaults/c1.1"):
        r = HistoryRecorder(run / (process.replace("/", "-") + ".jsonl"), process)
        r.complete(r.invoke("acquire", name="safety:defaults"), "ok", token=process, valid_until=1e12)
    saved = {"reports": [{"scenario": "partition-minority", "seconds": 1.0, "ttl": 2.0, "modes": {"defaults": {}}}]}
    (tmp_path / "report.json").write_text(json.dumps(saved))
    assert main(["--out", str(tmp_path), "--recheck"]) == 1
    assert "NO: held overlaps under defaults" in (tmp_path / "report.md").read_text()
