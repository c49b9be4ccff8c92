#!/usr/bin/env python3
"""Counts the test assertions that match English text rather than structured fields (issue 51:
tests assert on error keys, finding fields and key=value facts; at most 50 English matches stay,
each a message a user reads).

An English match is a string literal holding three or more words of letters in a row, inside an
assertion that searches output or a message: C++'s find/rfind/HasSubstr/count_of/contains, and
pytest's match= or an `assert "..." in ...`. A literal that continues on the next line counts by
its first line.

    scripts/english-assertions.py            # the count
    scripts/english-assertions.py --files    # and per file
    scripts/english-assertions.py --all      # and every match
"""
import collections
import glob
import re
import sys

CPP = re.compile(r'(?:HasSubstr|\.r?find|count_of\([^,]+,|contains\()\s*\(?\s*("(?:[^"\\]|\\.)*")')
PY = re.compile(r'''(?:match=r?|assert\s+r?)(["'])((?:(?!\1).)*)\1''')
WORDS = re.compile(r"[A-Za-z][A-Za-z'-]*(?:[ ,;:]+[A-Za-z][A-Za-z'-]*){2,}")


def matches():
    for path in sorted(glob.glob("tests/**/*.cpp", recursive=True) +
                       glob.glob("tests/**/*.h", recursive=True)):
        for number, line in enumerate(open(path), 1):
            for m in CPP.finditer(line):
                if WORDS.search(m.group(1)):
                    yield path, number, m.group(1)
    for path in sorted(glob.glob("tests/**/*.py", recursive=True)):
        for number, line in enumerate(open(path), 1):
            for m in PY.finditer(line):
                if WORDS.search(m.group(2)):
                    yield path, number, m.group(2)


def main():
    found = list(matches())
    print(len(found))
    if "--files" in sys.argv or "--all" in sys.argv:
        for path, count in collections.Counter(p for p, _, _ in found).most_common():
            print(f"{count:4} {path}")
    if "--all" in sys.argv:
        for path, number, text in found:
            print(f"{path}:{number}: {text[:100]}")


if __name__ == "__main__":
    main()
