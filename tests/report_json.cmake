# The JSON and CSV reports read back by Python's own json and csv modules: test_report
# writes them under ${PROJECT_BINARY_DIR}/report_out (a CTest fixture), this test parses
# them, checks the schema, the escaping of an awkward name, that roll-ups are the exact
# merge of their per-phase rows, and that the CSV has the same rows with the same values.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND AND TEST test_report)
  set_tests_properties(test_report PROPERTIES FIXTURES_SETUP sw_report_outputs)
  add_test(NAME report_json_python COMMAND ${Python3_EXECUTABLE} -c [=[
import csv, json, math, sys
from collections import Counter

out = sys.argv[1]

def not_json(name):
    raise ValueError("not a JSON number: " + name)

with open(out + "/report.json", encoding="utf-8") as f:
    doc = json.load(f, parse_constant=not_json)
assert doc["schema"] == "stepwatch.report", doc["schema"]
assert doc["schema_version"] == 1
assert doc["run"]["name"] == 'demo "run"'
nbuckets = doc["histogram"]["buckets"]

weird = 'say "hi"\n\tback\\slash ünïcöde µ 日本 \ufffd!'
rows = doc["rows"]
assert weird in {r["action"] for r in rows}, "the awkward name did not come back"

for r in rows:
    hist = r["hist"]
    assert sum(c for _, c in hist) == r["count"], r["action"]
    assert all(0 <= i < nbuckets for i, _ in hist)
    assert [i for i, _ in hist] == sorted({i for i, _ in hist})
    if r["count"] > 1:
        assert math.isclose(r["std_ns"], math.sqrt(r["m2"] / (r["count"] - 1)), rel_tol=1e-12)
        assert math.isclose(r["pstd_ns"], math.sqrt(r["m2"] / r["count"]), rel_tol=1e-12)
    assert r["min_ns"] <= r["p50_ns"] * 1.04 and r["p50_ns"] <= r["p99_ns"] <= r["max_ns"] * 1.04

# Roll-ups merge their per-phase rows exactly (what a reader merging reports does).
for ru in (r for r in rows if r["rollup"]):
    parts = [r for r in rows if not r["rollup"] and r["action"] == ru["action"]]
    assert parts, ru["action"]
    for key in ("count", "total_ns", "self_ns", "samples"):
        assert ru[key] == sum(p[key] for p in parts), (ru["action"], key)
    merged = Counter()
    for p in parts:
        merged.update(dict((i, c) for i, c in p["hist"]))
    assert dict(merged) == dict((i, c) for i, c in ru["hist"]), ru["action"]
    n = sum(p["count"] for p in parts)
    mean = sum(p["mean_ns"] * p["count"] for p in parts) / n
    m2 = sum(p["m2"] + p["count"] * (p["mean_ns"] - mean) ** 2 for p in parts)
    assert math.isclose(ru["mean_ns"], mean, rel_tol=1e-12)
    assert math.isclose(ru["m2"], m2, rel_tol=1e-9, abs_tol=1e-3)

with open(out + "/report.csv", newline="", encoding="utf-8") as f:
    table = list(csv.reader(f))
header, body = table[0], table[1:]
assert len(header) == 22 and all(len(r) == 22 for r in body)
assert len(body) == len(rows)
for line, r in zip(body, rows):
    rec = dict(zip(header, line))
    assert rec["action"] == r["action"] and rec["phase"] == r["phase"]
    assert int(rec["count"]) == r["count"]
    assert round(float(rec["total_s"]) * 1e9) == r["total_ns"]
    assert round(float(rec["p99_s"]) * 1e9) == r["p99_ns"]
print("json and csv read back:", len(rows), "rows")
]=] ${PROJECT_BINARY_DIR}/report_out)
  set_tests_properties(report_json_python PROPERTIES FIXTURES_REQUIRED sw_report_outputs
    TIMEOUT 60)
endif()
