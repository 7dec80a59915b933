#!/usr/bin/env python3
"""The ONNX node tests' pass rate over the operators the importer converts.

    python bench/onnx_node_rate.py REPORT   (REPORT: tests/onnx_node/run.py --report FILE)

A case counts for the operator it tests: its first node's, or for an
"_expanded" case (the operator spelled out as its function body) the
operator of the case it expands. The operators are those of the importer's
converter table (src/import/onnx/importer.cpp), which docs/importing.md lists.
"""
import collections
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    report = sys.argv[1]
    src = open(os.path.join(ROOT, "src", "import", "onnx", "importer.cpp")).read()
    converted = set(re.findall(r'\{"([A-Za-z]+)", &Importer::', src))
    rows = [l.rstrip("\n").split("\t") for l in open(report) if l.startswith("test_")]
    op_of = {name: op for name, op, _ in rows}
    by_op = collections.defaultdict(lambda: [0, 0])
    for name, op, result in rows:
        if name.endswith("_expanded") and name[: -len("_expanded")] in op_of:
            op = op_of[name[: -len("_expanded")]]
        if op in converted:
            by_op[op][1] += 1
            by_op[op][0] += result == "pass"
    ok = sum(v[0] for v in by_op.values())
    total = sum(v[1] for v in by_op.values())
    print(f"{ok} of {total} node tests of the {len(by_op)} converted operators they exercise pass ({100 * ok / total:.1f}%)")
    for op, (good, n) in sorted(by_op.items(), key=lambda kv: kv[1][0] - kv[1][1]):
        if good < n:
            print(f"  {op}: {good}/{n}")


if __name__ == "__main__":
    main()
