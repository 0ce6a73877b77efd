#!/usr/bin/env python3
"""scripts/function_lengths.py - no function in src/ longer than MAX lines.

A function is what the code's style makes of one: a line that is `{` alone
at the left margin opens its body, the next `}` alone there closes it, and
the name is the last identifier before a `(` on the lines above. Its length
counts both braces. A function over MAX is printed as FILE:LINE: NAME (N
lines) and fails, unless ALLOWED names it with why (a parser's state
machine, read best whole); an ALLOWED entry that no longer needs to be
there fails too, so the list only shrinks. The suite runs it (meson test
'function-length', suite style).

usage: scripts/function_lengths.py [SRC_DIR]   (default: src/ beside scripts/)
"""
import os
import re
import sys

MAX = 120

# (file under src/, function, why) for functions allowed past MAX. Empty:
# keep it so.
ALLOWED = []

NAME = re.compile(r'([A-Za-z_]\w*)\s*\(')


def functions(path):
    """(first line, name, length) of each function in path."""
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    start = name = None
    for i, line in enumerate(lines):
        if line == '{':
            j = i - 1
            while j > 0 and '(' not in lines[j]:
                j -= 1
            names = NAME.findall(lines[j])
            start, name = i, names[0] if names else '?'
        elif line == '}' and start is not None:
            yield start + 1, name, i - start + 1
            start = None


def main(argv):
    src = argv[0] if argv else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..',
                                            'src')
    allowed = {(f, fn) for f, fn, _why in ALLOWED}
    bad, seen, longest = 0, set(), (0, '')
    for d, dirs, names in os.walk(src):
        dirs.sort()
        for n in sorted(names):
            if not n.endswith('.c'):
                continue
            path = os.path.join(d, n)
            rel = os.path.relpath(path, src)
            for line, fn, length in functions(path):
                if length > longest[0]:
                    longest = (length, f'{rel}:{line}: {fn}')
                if length <= MAX:
                    continue
                if (rel, fn) in allowed:
                    seen.add((rel, fn))
                    continue
                bad += 1
                print(f'{rel}:{line}: {fn} ({length} lines, more than {MAX}): split it')
    for entry in sorted(allowed - seen):
        bad += 1
        print(f'STALE allow-list entry (within {MAX} lines now; remove it): {entry[0]} {entry[1]}')
    if not bad:
        print(f'every function in src/ is at most {MAX} lines (the longest: {longest[1]}, '
              f'{longest[0]} lines)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
