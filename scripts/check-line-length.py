#!/usr/bin/env python3
'''Fails when a line of Swift code is longer than 120 columns.

`swift format` breaks code to 120 columns but cannot break a string literal or a comment, so this
catches those. Exempt: data kept verbatim (the inside of a multi-line string literal, three quotes;
a raw string, #"..."#, JSON fixtures as they are on the wire), a test's or suite's name (a literal
the compiler wants whole), and generated files.
'''
import os
import subprocess
import sys

LIMIT = 120


def long_lines(path):
    inside = False
    previous = ""
    with open(path, encoding="utf-8") as source:
        for number, line in enumerate(source, 1):
            line = line.rstrip("\n")
            quotes = line.count('"""')
            name = any(text.lstrip().startswith(("@Test(", "@Suite(")) for text in (line, previous))
            previous = line
            exempt = inside or quotes > 0 or '#"' in line or name
            if quotes % 2 == 1:
                inside = not inside
            if len(line) > LIMIT and not exempt:
                yield number, len(line)


def main():
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.swift"],
                            capture_output=True, text=True, check=True).stdout.split()
    files = [path for path in listed if os.path.exists(path)]
    found = 0
    for path in files:
        with open(path, encoding="utf-8") as source:
            if "swift-format-ignore-file" in source.read(400):
                continue
        for number, length in long_lines(path):
            print("%s:%d: %d columns (at most %d)" % (path, number, length, LIMIT))
            found += 1
    if found:
        sys.exit("%d lines are longer than %d columns" % (found, LIMIT))


if __name__ == "__main__":
    main()
