#!/usr/bin/env python3
"""Counts what gtest XML reports ran, for tests/gpu/run.sh: one line per call,

    ran=N skipped=S known=K failed=F unexpected=NAME,NAME...

`known` counts the skips whose message names a limit of the machine rather than of weightcast:
NCCL refusing two ranks on one GPU (its "Duplicate GPU detected", which the two-rank tests
quote), which only a machine with two GPUs lifts. Every other skip is `unexpected` and listed by
name, so that on a machine with a GPU a test that skipped for any other reason (no usable CUDA
device, NCCL that failed to start) fails the step instead of passing unseen.

    gtest_counts.py FILE.xml [FILE.xml ...]     (missing files count as nothing ran)
"""

import sys
import xml.etree.ElementTree as ET

# NCCL's own words, not the test's: a test that says "refused" for another reason (NCCL that
# did not load, a join that timed out) stays unexpected.
KNOWN_LIMITS = ("Duplicate GPU detected",)


def count(paths):
    ran = skipped = known = failed = 0
    unexpected = []
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            continue
        for case in root.iter("testcase"):
            name = "%s.%s" % (case.get("classname", "?"), case.get("name", "?"))
            ran += 1
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            skip = case.find("skipped")
            if case.get("result") == "skipped" or skip is not None:
                skipped += 1
                message = (skip.get("message", "") + (skip.text or "")) if skip is not None else ""
                if any(limit in message for limit in KNOWN_LIMITS):
                    known += 1
                else:
                    unexpected.append(name)
    return ran, skipped, known, failed, unexpected


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    ran, skipped, known, failed, unexpected = count(argv[1:])
    print("ran=%d skipped=%d known=%d failed=%d unexpected=%s" % (
        ran, skipped, known, failed, ",".join(unexpected)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
