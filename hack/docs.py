#!/usr/bin/env python3
"""The book's checks, run by `make lint` (and `make docs`):

  reference   docs/src/reference.md is generated from crds/*.yaml (every field of spec and
              status, its type, bounds and description); `hack/docs.py reference --write`
              writes it, and the check fails when the committed page differs, so a field
              added to the API without its page fails the build.
  links       every relative link in README.md, e2e/README.md and docs/src/*.md names a file
              that exists, and every #anchor a heading of that file (GitHub's slugs).

Usage: hack/docs.py check | hack/docs.py reference --write
"""

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / 'docs' / 'src' / 'reference.md'
KINDS = [
    ('EtcdCluster', 'etcdclusters.etcd.database.coreos.com.yaml'),
    ('EtcdBackup', 'etcdbackups.etcd.database.coreos.com.yaml'),
    ('EtcdRestore', 'etcdrestores.etcd.database.coreos.com.yaml'),
]


def kind_of(schema):
    """The field's type as a reader wants it: `string`, `[]object`, `map[string]string`..."""
    t = schema.get('type')
    if t == 'array':
        return '[]' + kind_of(schema.get('items', {}))
    if t == 'object' and 'additionalProperties' in schema and not schema.get('properties'):
        return 'map[string]' + kind_of(schema['additionalProperties'] or {})
    if schema.get('x-kubernetes-int-or-string'):
        return 'int or string'
    if schema.get('x-kubernetes-preserve-unknown-fields') and not t:
        return 'any'
    return t or 'object'


def bounds(schema):
    """Bounds and choices the schema enforces, in words."""
    parts = []
    for key, word in (('minimum', 'min'), ('maximum', 'max'), ('minLength', 'min length'),
                      ('maxLength', 'max length'), ('maxItems', 'max items'),
                      ('pattern', 'pattern')):
        if key in schema:
            v = schema[key]
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            parts.append(f'{word} `{v}`')
    if 'enum' in schema:
        parts.append('one of ' + ', '.join(f'`{e}`' for e in schema['enum'] if e is not None))
    if 'default' in schema:
        parts.append(f"default `{schema['default']}`")
    return '; '.join(parts)


def cell(text):
    return ' '.join(str(text).split()).replace('|', '\\|')


def fields(schema, path, required, out):
    for name, sub in sorted((schema.get('properties') or {}).items()):
        p = f'{path}.{name}' if path else name
        req = ' (required)' if name in required else ''
        desc = cell(sub.get('description', ''))
        b = bounds(sub)
        out.append(f"| `{p}`{req} | {kind_of(sub)} | {desc}{' (' + cell(b) + ')' if b else ''} |")
        inner = sub.get('items', sub) if sub.get('type') == 'array' else sub
        if inner.get('properties'):
            fields(inner, p + ('[]' if sub.get('type') == 'array' else ''),
                   set(inner.get('required', [])), out)


def reference():
    out = [
        '# Reference',
        '',
        'Every field of the three kinds (`etcd.database.coreos.com/v1beta2`), generated from the',
        'CRDs in `crds/` by `hack/docs.py reference --write` (`make lint` fails when this page',
        'and the CRDs differ). Bounds are enforced by the API server at `kubectl apply`.',
    ]
    for kind, file in KINDS:
        crd = yaml.safe_load((ROOT / 'crds' / file).read_text())
        version = crd['spec']['versions'][0]
        schema = version['schema']['openAPIV3Schema']
        for part in ('spec', 'status'):
            sub = schema['properties'].get(part)
            if not sub:
                continue
            out += ['', f'## {kind} `{part}`', '']
            if sub.get('description'):
                out += [cell(sub['description']), '']
            out += ['| field | type | meaning |', '| --- | --- | --- |']
            rows = []
            fields(sub, '', set(sub.get('required', [])), rows)
            out += rows
    return '\n'.join(out) + '\n'


def slug(heading):
    """GitHub's anchor for a heading."""
    h = re.sub(r'`', '', heading.strip().lower())
    h = re.sub(r'[^\w\- ]', '', h)
    return h.replace(' ', '-')


def anchors_of(path):
    text = path.read_text()
    text = re.sub(r'```.*?```', '', text, flags=re.S)
    found, seen = set(), {}
    for m in re.finditer(r'^#{1,6} (.*)$', text, re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        found.add(s if n == 0 else f'{s}-{n}')
        seen[s] = n + 1
    found.update(re.findall(r'<a id="([^"]+)"></a>', text))
    return found


def links():
    broken = []
    pages = [ROOT / 'README.md', ROOT / 'e2e' / 'README.md'] + sorted(
        (ROOT / 'docs' / 'src').glob('*.md'))
    for page in pages:
        text = re.sub(r'```.*?```', '', page.read_text(), flags=re.S)
        text = re.sub(r'`[^`\n]*`', '', text)
        for m in re.finditer(r'\]\(([^)\s]+)\)', text):
            target = m.group(1)
            if re.match(r'^[a-z]+:', target):
                continue
            file, _, anchor = target.partition('#')
            dest = (page.parent / file).resolve() if file else page
            rel = page.relative_to(ROOT)
            if not dest.exists():
                broken.append(f'{rel}: {target}: no such file')
            elif anchor and dest.suffix == '.md' and anchor not in anchors_of(dest):
                broken.append(f'{rel}: {target}: no such heading')
    return broken


def main():
    if sys.argv[1:] == ['reference', '--write']:
        REFERENCE.write_text(reference())
        return 0
    failed = False
    if not REFERENCE.exists() or REFERENCE.read_text() != reference():
        print('docs/src/reference.md differs from the CRDs: run hack/docs.py reference --write')
        failed = True
    for b in links():
        print(f'broken link {b}')
        failed = True
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
