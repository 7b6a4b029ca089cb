#!/usr/bin/env python3
"""The import rules of the operator's modules, checked by `make lint`; exits 1 on a break.

  plan        src/cluster/plan.rs (or plan/) imports nothing of the crate but its own
              submodules: the planner stays pure and testable without a client.
  observe     observe never imports act: a stage reads the ones below it, never the one above.
  task        nothing imports cluster::task or cluster::supervisor but src/main.rs, src/lib.rs,
              the supervisor, which starts the tasks, and the task's own files.
  kube        src/kube/ imports only api, etcd, pki and itself: everyone may import it, so it
              can never close an import circle.
  controllers the three controllers (cluster, backup, restore) never import each other: they
              share code through modules below them (store, tls, seed, kube, api), not
              through each other.
  libraries   src/store/, src/tls/, src/seed.rs and src/access.rs import no controller: they are the
              shared floor the controllers stand on.

Every path into the crate counts, `use` or inline (`crate::`, `super::`, `self::`, and
`etcd_operator::` from the binary and the test crates), with grouped imports expanded; comments
and string literals do not. Test modules (`#[cfg(test)] mod tests { ... }`, or a file named
tests.rs) are not read: a test may check a module against what uses it, which is no dependency
of the shipped code.

KNOWN lists breaks that predate the rule, each by file and imported path: they are printed on
every run and do not fail it, while any other break does. Remove an entry once it is fixed.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

KNOWN = set()

TOKEN = re.compile(
    r'//[^\n]*'                      # line comment
    r'|/\*.*?\*/'                    # block comment (not nested; none are)
    r'|b?r(#*)".*?"\1'               # raw string
    r'|b?"(?:\\.|[^"\\])*"'          # string
    r"|b?'(?:\\.|[^'\\\n])'",        # character (a lifetime has no closing quote)
    re.S,
)


def blank(match):
    """Keeps the newlines of what it removes, so line numbers stay."""
    return re.sub(r'[^\n]', ' ', match.group(0))


def strip_tests(code):
    """Blanks every `#[cfg(test)] mod NAME { ... }` (code without comments and strings)."""
    out = code
    for m in re.finditer(r'#\[cfg\(test\)\]\s*mod\s+\w+\s*\{', code):
        depth, i = 1, m.end()
        while depth and i < len(code):
            depth += {'{': 1, '}': -1}.get(code[i], 0)
            i += 1
        out = out[:m.start()] + re.sub(r'[^\n]', ' ', out[m.start():i]) + out[i:]
    return out


def module_of(rel):
    """`crate::a::b` for src/a/b.rs and src/a/b/mod.rs; `crate` for a crate root."""
    parts = list(Path(rel).with_suffix('').parts)
    if parts[0] != 'src' or parts[1:] in (['lib'], ['main']):
        return ['crate']
    parts = parts[1:]
    if parts[-1] == 'mod':
        parts = parts[:-1]
    return ['crate'] + parts


SEGMENT = re.compile(r'\s*(\w+|\*)(?:\s+as\s+\w+)?')
SEP = re.compile(r'\s*::\s*')
COMMA = re.compile(r'\s*,?\s*')


def tree(code, i):
    """Parses a use tree (or a plain path) at `i`: a list of paths, each a list of segments."""
    paths, path = [], []
    while True:
        m = SEGMENT.match(code, i)
        if m:
            path.append(m.group(1))
            i = m.end()
        m = SEP.match(code, i)
        if not m:
            break
        i = m.end()
        if code.startswith('{', i):
            i += 1
            while i < len(code):
                start = i
                sub, i = tree(code, i)
                paths += [path + s for s in sub if s]
                i = COMMA.match(code, i).end()
                if code.startswith('}', i) or i == start:
                    return paths, i + 1
            return paths, i
    return paths + [path], i


def imports(rel, text):
    """(line, resolved path) of every path into the operator's library in the file."""
    code = strip_tests(TOKEN.sub(blank, text))
    here = module_of(rel)
    # Outside src/ (the test crates, e2e) `crate::` and `super::` are that crate's own: only
    # `etcd_operator::` reaches the library.
    roots = 'crate|super|self|etcd_operator' if rel.startswith('src/') else 'etcd_operator'
    found = []
    for m in re.finditer(rf'(?<![\w:])({roots})(?=\s*::)', code):
        line = code.count('\n', 0, m.start()) + 1
        for path in tree(code, m.start())[0]:
            base = here
            while path and path[0] in ('super', 'self'):
                base = base[:-1] if path[0] == 'super' else base
                path = path[1:]
            if path and path[0] in ('crate', 'etcd_operator'):
                base, path = ['crate'], path[1:]
            # `use a::{self, b}` names `a` itself.
            path = [p for p in path if p != 'self']
            found.append((line, '::'.join(base + path)))
    return found


def under(path, *modules):
    return any(path == m or path.startswith(m + '::') for m in modules)


def breaks(rel, path):
    """The rules `path`, imported by file `rel`, breaks."""
    broken = []
    if not path.startswith('crate'):
        return broken
    if rel in ('src/cluster/plan.rs',) or rel.startswith('src/cluster/plan/'):
        if not under(path, 'crate::cluster::plan'):
            broken.append('plan')
    if (rel == 'src/cluster/observe.rs' or rel.startswith('src/cluster/observe/')) and under(
        path, 'crate::cluster::act'
    ):
        broken.append('observe')
    starters = ('src/main.rs', 'src/lib.rs', 'src/cluster/supervisor.rs', 'src/cluster/mod.rs')
    inside_task = rel.startswith('src/cluster/task/')
    if rel not in starters and not inside_task and under(
        path, 'crate::cluster::task', 'crate::cluster::supervisor'
    ):
        # A module's paths to itself are no import.
        if not (rel.startswith('src/') and under(path, '::'.join(module_of(rel)))):
            broken.append('task')
    if rel.startswith('src/kube/') and not under(
        path, 'crate::api', 'crate::etcd', 'crate::pki', 'crate::kube'
    ):
        broken.append('kube')
    controllers = ('cluster', 'backup', 'restore')
    for mine in controllers:
        others = [f'crate::{c}' for c in controllers if c != mine]
        if rel.startswith(f'src/{mine}/') and under(path, *others):
            broken.append('controllers')
    libraries = rel.startswith(('src/store/', 'src/tls/')) or rel in ('src/seed.rs', 'src/access.rs')
    if libraries and under(path, *[f'crate::{c}' for c in controllers]):
        broken.append('libraries')
    return broken


def main():
    files = [
        f
        for d in ('src', 'tests', 'e2e/src', 'e2e/tests')
        for f in sorted((ROOT / d).rglob('*.rs'))
        if f.name != 'tests.rs'
    ]
    failed, known = [], []
    for f in files:
        rel = f.relative_to(ROOT).as_posix()
        for line, path in imports(rel, f.read_text()):
            for rule in breaks(rel, path):
                entry = f'{rel}:{line}: {rule}: imports {path}'
                (known if (rule, rel, path) in KNOWN else failed).append(entry)
    for entry in known:
        print(f'known (not fixed yet) {entry}')
    for entry in failed:
        print(f'BROKEN {entry}')
    if failed:
        print(f'{len(failed)} import rule(s) broken; the rules are in {Path(__file__).name}')
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
