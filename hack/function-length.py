#!/usr/bin/env python3
"""No function in src/ longer than 80 lines, checked by `make lint`; exits 1 on a break.

A function is counted from its `fn` line to its closing brace, comments and blank lines
included, as a reader sees it. Test modules count too, except property-test and simulation
code, which is allowed its length by an `// allow-long: why` comment on the line before the
`fn` (its reason printed on every run).
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 80
FN = re.compile(r'^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)')


def functions(lines):
    """(name, first line, length, allowance) of each function with a body."""
    i = 0
    while i < len(lines):
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        indent = len(m.group(1))
        j = i
        while j < len(lines) and not lines[j].rstrip().endswith(('{', ';')):
            j += 1
        if j >= len(lines) or lines[j].rstrip().endswith(';'):
            i = j + 1
            continue
        k = j + 1
        while k < len(lines) and not (
            lines[k].startswith(' ' * indent + '}')
            and len(lines[k]) - len(lines[k].lstrip()) == indent
        ):
            k += 1
        allow = re.search(r'//\s*allow-long:\s*(.*)', lines[i - 1]) if i else None
        yield m.group(2), i + 1, k - i + 1, allow.group(1) if allow else None
        i += 1


def main():
    failed = False
    for path in sorted((ROOT / 'src').rglob('*.rs')):
        rel = path.relative_to(ROOT)
        for name, line, length, allow in functions(path.read_text().split('\n')):
            if length <= LIMIT:
                continue
            where = f'{rel}:{line}: {name} is {length} lines'
            if allow:
                print(f'allowed: {where} ({allow})')
            else:
                print(f'{where} (at most {LIMIT})', file=sys.stderr)
                failed = True
    if failed:
        sys.exit(1)
    print('function length: ok')


if __name__ == '__main__':
    main()
