"""Check a Chrome trace written by `stepwatch export --chrome` with Python's json module.

usage: check_chrome_trace.py TRACE.json NRANKS
Fails (exit 1, with the reason) unless the file is strict JSON in the Trace Event format:
complete ("X") events with numeric ts/dur on every rank, counter ("C") events, and
process_name/thread_name metadata for each pid/tid used.
"""
import json
import sys


def main(path, nranks):
    with open(path, encoding="utf-8") as f:
        # parse_constant rejects NaN/Infinity, which Perfetto's strict parser refuses too.
        trace = json.load(f, parse_constant=lambda c: sys.exit(f"non-JSON constant {c}"))
    events = trace["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    counters = [e for e in events if e["ph"] == "C"]
    meta = [e for e in events if e["ph"] == "M"]
    assert spans, "no X events"
    assert counters, "no C events"
    for e in spans:
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        assert isinstance(e["name"], str) and e["name"], e
    for e in counters:
        assert all(isinstance(v, (int, float)) for v in e["args"].values()), e
    pids = {e["pid"] for e in spans}
    assert len(pids) == nranks, f"spans on pids {pids}, want {nranks} ranks"
    named_pids = {e["pid"] for e in meta if e["name"] == "process_name"}
    named_tids = {(e["pid"], e["tid"]) for e in meta if e["name"] == "thread_name"}
    assert pids <= named_pids, "a pid without process_name"
    assert {(e["pid"], e["tid"]) for e in spans} <= named_tids, "a tid without thread_name"
    print(f"ok: {len(spans)} spans, {len(counters)} counter samples, {len(pids)} ranks")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
