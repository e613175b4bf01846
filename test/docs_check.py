#!/usr/bin/python3
"""test/docs_check.py — the documentation cannot drift from the code.

  docs_check.py --root DIR --catalog FILE          check the tree at DIR
  docs_check.py --root DIR --catalog FILE --self-test
                                                   ... and show that each
                                                   kind of drift is refused

FILE is what `--dump-sql` prints, run by psql in a database where lease_fence
was just created, with the library loaded (test/run.sh, suite "docs"):

  F <tab> name <tab> pg_get_function_arguments      every function
  V <tab> name <tab> column,column,...              every view
  R <tab> name                                      every other relation, type
  G <tab> name <tab> context <tab> boot_val         every setting

and the SQLSTATEs come from the sources (MAKE_SQLSTATE('L','F',...) in src/,
'LFnnn' in the install scripts and the portable edition).  docs/reference.md
must then hold, for each function, a heading "### lease_fence.NAME" and the
text "lease_fence.NAME(ARGUMENTS)" exactly as the catalog prints them; for
each view a heading and a table row "| `column` |" for each column; every
other relation and type by name; for each setting, under "## Settings", a row
"| `lease_fence.NAME` | `CONTEXT` | `DEFAULT`" (an empty default as `''`);
for each SQLSTATE, under "## SQLSTATEs", a row "| `LFnnn` |".  And the other
way: no heading or settings row for something the catalog does not have.

Every relative link of every Markdown file of the tree must name a file
that exists, and its #anchor a heading (GitHub's slugs) or an <a id> there.

Every `lease_fence.NAME(` in a ```sql block of README.md and docs/**/*.md
(not ```sh blocks: the README's set-up is run by the readme suite) must name
a function of the catalog, and fit one of its overloads:
  - a call: its positional arguments number at least the arguments without
    a default and at most all of them, and each named argument (`x => v`,
    `x := v`) is an argument of that overload after the positional ones,
    given once, every argument without a default given one way or the other;
  - in a statement that names a function rather than calling it (GRANT,
    REVOKE, COMMENT ON, ALTER FUNCTION, DROP FUNCTION) the list is of
    argument types, and must be the overload's input types exactly (after
    int/int4 -> integer, int8 -> bigint, bool -> boolean) -- except in a
    block that runs ALTER EXTENSION lease_fence UPDATE TO a version other
    than the control file's default_version, whose grants name that older
    version's functions: there only the name is checked;
  - `EXECUTE FUNCTION lease_fence.NAME(...)` in CREATE TRIGGER passes
    trigger arguments, and `lease_fence.NAME(...) RETURNS ...` is a
    declaration (the reference check above compares those): only the name.
docs/managed.md, the portable edition's page, is checked against the
portable edition's functions (--portable-catalog: the same F lines of a
database where portable/lease_fence_portable.sql was run), every other page
against the C edition's.
Limits: argument types of a call are not checked (a placeholder such as
`<value>` counts as one argument); text after `--` and inside quotes is not
read, so a call in a comment or a string is not checked; a multi-word type
of an unnamed argument in the catalog (none today) would be read as a name.

Prints one "ok - ..." / "not ok - ..." line per check, for test/run.sh.
"""

import argparse
import os
import re
import shutil
import sys
import tempfile

DUMP_PORTABLE_SQL = r"""
SELECT 'F' || E'\t' || p.proname || E'\t' || pg_get_function_arguments(p.oid)
FROM pg_proc p WHERE p.pronamespace = 'lease_fence'::regnamespace
ORDER BY 1;
"""

DUMP_SQL = r"""
LOAD 'lease_fence';
SELECT 'F' || E'\t' || p.proname || E'\t' || pg_get_function_arguments(p.oid)
FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'lease_fence'
UNION ALL
SELECT CASE WHEN c.relkind = 'v' THEN 'V' || E'\t' || c.relname || E'\t' ||
         (SELECT string_agg(a.attname, ',' ORDER BY a.attnum) FROM pg_attribute a
          WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
       ELSE 'R' || E'\t' || c.relname END
FROM pg_class c JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'lease_fence'
UNION ALL
SELECT 'R' || E'\t' || t.typname
FROM pg_type t JOIN pg_depend d ON d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'lease_fence'
UNION ALL
SELECT 'G' || E'\t' || name || E'\t' || context || E'\t' || boot_val
FROM pg_settings WHERE name LIKE 'lease\_fence.%'
ORDER BY 1;
"""

SKIP_DIRS = {'.git', 'node_modules', 'dist', 'tmp_check', 'target', 'build',
             'results', 'output_iso', '__pycache__', '.venv', '.pytest_cache',
             '.debhelper'}


class Result:
    def __init__(self):
        self.ok = 0
        self.bad = 0

    def check(self, good, name, why=''):
        if good:
            self.ok += 1
            print(f'ok - {name}')
        else:
            self.bad += 1
            print(f'not ok - {name}' + (f': {why}' if why else ''))


# ---------------------------------------------------------------- sources

def read_catalog(path):
    funcs, views, others, settings = {}, {}, set(), {}
    with open(path, encoding='utf-8') as f:
        for line in f:
            parts = line.rstrip('\n').split('\t')
            if parts[0] == 'F':
                funcs.setdefault(parts[1], []).append(parts[2] if len(parts) > 2 else '')
            elif parts[0] == 'V':
                views[parts[1]] = parts[2].split(',') if len(parts) > 2 and parts[2] else []
            elif parts[0] == 'R':
                others.add(parts[1])
            elif parts[0] == 'G':
                settings[parts[1]] = (parts[2], parts[3] if len(parts) > 3 else '')
    return funcs, views, others, settings


def source_files(root, endings):
    """The C sources under src/, in every layer's folder, in name order."""
    src = os.path.join(root, 'src')
    return sorted(os.path.join(dp, n) for dp, _, fs in os.walk(src) for n in fs
                  if n.endswith(endings))


def preload_only_settings(root):
    """The settings src/ defines as PGC_POSTMASTER, which exist only while
    shared_preload_libraries loads lease_fence: their names without the
    lease_fence. prefix."""
    names = set()
    for path in source_files(root, ('.c',)):
        with open(path, encoding='utf-8') as f:
            text = f.read()
        for m in re.finditer(r'DefineCustom\w+Variable\(\s*"lease_fence\.(\w+)"(.*?)\);', text, re.S):
            if 'PGC_POSTMASTER' in m.group(2):
                names.add(m.group(1))
    return names


def read_sqlstates(root):
    codes = set()
    for path in source_files(root, ('.c', '.h')):
        with open(path, encoding='utf-8') as f:
            for m in re.finditer(r"MAKE_SQLSTATE\('L',\s*'F',\s*'(\w)',\s*'(\w)',\s*'(\w)'\)", f.read()):
                codes.add('LF' + ''.join(m.groups()))
    scripts = [os.path.join(root, n) for n in os.listdir(root) if re.match(r'lease_fence--.*\.sql$', n)]
    portable = os.path.join(root, 'portable')
    if os.path.isdir(portable):
        scripts += [os.path.join(portable, n) for n in os.listdir(portable) if n.endswith('.sql')]
    for path in scripts:
        with open(path, encoding='utf-8') as f:
            codes.update(re.findall(r"'(LF\d{3})'", f.read()))
    return codes


# ---------------------------------------------------------------- markdown

def without_code(text):
    """The lines of text outside fenced code blocks (others blanked)."""
    out, fence = [], None
    for line in text.split('\n'):
        m = re.match(r'^\s*(```+|~~~+)', line)
        if fence is None and m:
            fence = m.group(1)[0] * 3
            out.append('')
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            out.append('')
        else:
            out.append(line)
    return out


def slug(heading):
    """GitHub's anchor for a heading's text."""
    t = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', heading)     # links: their text
    t = re.sub(r'<[^>]+>', '', t)                               # inline HTML
    t = t.replace('`', '').replace('*', '')
    t = t.strip().lower()
    t = re.sub(r'[^\w\- ]', '', t)
    return t.replace(' ', '-')


def anchors(path, cache={}):
    if path not in cache:
        with open(path, encoding='utf-8') as f:
            lines = without_code(f.read())
        seen, found = {}, set()
        for line in lines:
            m = re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
            if m:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else f'{s}-{n}')
            for a in re.findall(r'<a\s+(?:id|name)="([^"]+)"', line):
                found.add(a)
        cache[path] = found
    return cache[path]


def markdown_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS
                             and not (os.path.basename(dirpath) == 'debian' and d.startswith('postgresql-')))
        for n in sorted(filenames):
            if n.endswith('.md'):
                yield os.path.join(dirpath, n)


def broken_links(paths, root, judged=lambda dest: True):
    """The relative links of the Markdown files paths whose file or #anchor
    does not exist, as "file:line: target (why)", and how many links were
    judged; a link whose destination judged() refuses is not."""
    broken, count = [], 0
    for path in paths:
        with open(path, encoding='utf-8') as f:
            lines = without_code(f.read())
        for lineno, line in enumerate(lines, 1):
            line = re.sub(r'`[^`]*`', '', line)                 # inline code is no link
            for target in re.findall(r'\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)', line):
                if re.match(r'^[a-z][a-z0-9+.-]*:', target):    # http:, mailto:, ...
                    continue
                file_part, _, anchor = target.partition('#')
                dest = path if file_part == '' else os.path.normpath(
                    os.path.join(os.path.dirname(path), file_part))
                if not judged(dest):
                    continue
                count += 1
                where = f'{os.path.relpath(path, root)}:{lineno}: {target}'
                if not os.path.exists(dest):
                    broken.append(f'{where} (no such file)')
                elif anchor and dest.endswith('.md') and anchor not in anchors(dest):
                    broken.append(f'{where} (no such anchor)')
    return broken, count


def check_links(root, res):
    broken, count = broken_links(markdown_files(root), root)
    res.check(not broken and count > 0,
              f'links: every relative link of the Markdown files resolves ({count} links)',
              '; '.join(broken[:20]) + (f' ... and {len(broken) - 20} more' if len(broken) > 20 else ''))


# ---------------------------------------------------------------- reference

def sections(lines):
    """{'## Title': [lines]} for the level-2 sections of a file."""
    out, cur = {}, None
    for line in lines:
        if re.match(r'^##\s', line) and not line.startswith('###'):
            cur = line.strip()
            out[cur] = []
        elif cur is not None:
            out[cur].append(line)
    return out


def check_reference(root, catalog, res):
    path = os.path.join(root, 'docs', 'reference.md')
    if not os.path.exists(path):
        res.check(False, 'reference: docs/reference.md exists')
        return
    with open(path, encoding='utf-8') as f:
        text = f.read()
    lines = without_code(text)
    funcs, views, others, settings = catalog
    headings = {m.group(1) for m in (re.match(r'^###\s+`?lease_fence\.(\w+)`?\s*$', l) for l in lines) if m}
    flat = ' '.join(text.split())                   # signatures may wrap

    missing = []
    for name in sorted(funcs):
        if name not in headings:
            missing.append(f'{name}: no heading "### lease_fence.{name}"')
        for args in funcs[name]:
            sig = f'lease_fence.{name}({args})'
            if ' '.join(sig.split()) not in flat:
                missing.append(f'{name}: no signature "{sig}"')
    res.check(not missing, f'reference: every function, with its signature as the catalog has it ({len(funcs)} names)',
              '; '.join(missing))

    missing = []
    for name in sorted(views):
        if name not in headings:
            missing.append(f'{name}: no heading "### lease_fence.{name}"')
            continue
        body, inside = [], False
        for line in lines:
            if re.match(r'^###\s+`?lease_fence\.' + re.escape(name) + r'`?\s*$', line):
                inside = True
                continue
            if inside and re.match(r'^##', line):
                break
            if inside:
                body.append(line)
        for col in views[name]:
            if not any(re.match(r'^\|\s*`' + re.escape(col) + r'`\s*\|', l) for l in body):
                missing.append(f'{name}: no row for column "{col}"')
    res.check(not missing, f'reference: every view, with a row for each of its columns ({len(views)} views)',
              '; '.join(missing))

    missing = [n for n in sorted(others) if f'lease_fence.{n}' not in text]
    res.check(not missing, f'reference: every other relation and type by name ({len(others)})',
              ', '.join(missing))

    extra = sorted(h for h in headings if h not in funcs and h not in views)
    res.check(not extra, 'reference: no heading for a function or view the extension does not have',
              ', '.join(extra))

    secs = sections(lines)
    rows = {}
    for line in secs.get('## Settings', []):
        m = re.match(r'^\|\s*`lease_fence\.(\w+)`\s*\|\s*`([^`]*)`\s*\|\s*`([^`]*)`', line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    bad = []
    for full, (context, boot) in sorted(settings.items()):
        name = full[len('lease_fence.'):]
        want = (context, boot if boot != '' else "''")
        if name not in rows:
            bad.append(f'{full}: no row under "## Settings"')
        elif rows[name] != want:
            bad.append(f'{full}: the row says context `{rows[name][0]}`, default `{rows[name][1]}`; '
                       f'the server says `{want[0]}`, `{want[1]}`')
    # a PGC_POSTMASTER setting exists only when lease_fence is preloaded
    # (the catalog's server does not preload it): its row must say
    # `postmaster`, and a source file must define it so
    postmaster_only = preload_only_settings(root)
    bad += [f'lease_fence.{n}: a row for a setting the extension does not define'
            for n in sorted(rows) if f'lease_fence.{n}' not in settings
            and not (n in postmaster_only and rows[n][0] == 'postmaster')]
    res.check(not bad and settings, f'reference: every setting, with its context and default ({len(settings)})',
              '; '.join(bad) if settings else 'the catalog has no setting: was the library loaded?')

    codes = read_sqlstates(root)
    documented = {m.group(1) for m in (re.match(r'^\|\s*`(LF\w{3})`\s*\|', l)
                                       for l in secs.get('## SQLSTATEs', [])) if m}
    bad = [f'{c}: no row under "## SQLSTATEs"' for c in sorted(codes - documented)]
    bad += [f'{c}: documented, but the extension never raises it' for c in sorted(documented - codes)]
    res.check(not bad and codes, f'reference: every SQLSTATE the extension defines ({len(codes)})', '; '.join(bad))


# ---------------------------------------------------------------- SQL blocks

TYPE_ALIASES = {'int': 'integer', 'int4': 'integer', 'int8': 'bigint', 'bool': 'boolean'}
NAMING = re.compile(r'^\s*(GRANT|REVOKE|COMMENT|ALTER\s+FUNCTION|DROP\s+FUNCTION)\b', re.I)


def split_top(text):
    """text split at its commas outside parentheses, brackets and quotes."""
    parts, depth, cur, quote = [], 0, '', None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in '\'"':
            quote = ch
        elif ch in '([':
            depth += 1
        elif ch in ')]':
            depth -= 1
        elif ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
            continue
        cur += ch
    return parts + [cur] if cur.strip() or parts else []


def overloads(args_lists):
    """For each catalog signature of a name, its input arguments as
    (name or None, type, has default), OUT arguments left out."""
    out = []
    for args in args_lists:
        ins = []
        for a in split_top(args):
            a = a.strip()
            m = re.match(r'^(IN|OUT|INOUT|VARIADIC)\s+(.*)$', a)
            mode, a = (m.group(1), m.group(2)) if m else ('IN', a)
            if mode == 'OUT':
                continue
            decl, _, default = a.partition(' DEFAULT ')
            words = decl.split(None, 1)
            name, typ = (words[0].strip('"'), words[1]) if len(words) == 2 else (None, decl)
            ins.append((name, typ.strip(), bool(default)))
        out.append(ins)
    return out


def sql_code(block):
    """block with what is in quotes and after -- blanked (kept as spaces, and
    quotes kept as '' so that an argument stays one), so that only code is read."""
    out, i, n = [], 0, len(block)
    while i < n:
        ch = block[i]
        if ch == '-' and block.startswith('--', i):
            j = block.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif ch in '\'"':
            j = block.find(ch, i + 1)
            j = n - 1 if j < 0 else j
            out.append(ch + ' ' * (j - i - 1) + (ch if j > i else ''))
            i = j + 1
        else:
            out.append(ch)
            i += 1
    return ''.join(out)


def sql_blocks(path):
    """(first line number, text) of each ```sql block of a Markdown file."""
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    blocks, cur, start, fence = [], None, 0, None
    for lineno, line in enumerate(lines, 1):
        m = re.match(r'^\s*(```+|~~~+)\s*(\w*)', line)
        if fence is None and m:
            fence = m.group(1)
            cur, start = ([] if m.group(2) == 'sql' else None), lineno + 1
        elif fence is not None and line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            if cur is not None:
                blocks.append((start, '\n'.join(cur)))
            fence, cur = None, None
        elif cur is not None:
            cur.append(line)
    return blocks


def default_version(root):
    with open(os.path.join(root, 'lease_fence.control'), encoding='utf-8') as f:
        m = re.search(r"^default_version\s*=\s*'([^']*)'", f.read(), re.M)
    return m.group(1) if m else None


def call_fits(ins, args):
    """Whether a call with these argument texts fits one overload's inputs."""
    named, positional = {}, 0
    for a in args:
        m = re.match(r'^\s*"?(\w+)"?\s*(=>|:=)', a)
        if m:
            if m.group(1) in named:
                return False
            named[m.group(1)] = True
        elif named:
            return False                       # positional after named
        else:
            positional += 1
    if positional > len(ins):
        return False
    rest = ins[positional:]
    names = {n for n, _, _ in rest if n}
    if any(n not in names for n in named):
        return False
    return all(d or n in named for n, _, d in rest)


def sql_call_problems(root, path, funcs, version):
    """The lease_fence calls of path's sql blocks that the catalog funcs
    refuses, as "file:line: text (why)", and how many were read."""
    bad, count = [], 0
    rel = os.path.relpath(path, root)
    for start, block in sql_blocks(path):
        code = sql_code(block)
        m = re.search(r"ALTER\s+EXTENSION\s+lease_fence\s+UPDATE\s+TO\s+'([^']*)'", block, re.I)
        older = bool(m) and m.group(1) != version
        pos = 0
        for stmt in re.split(r'(?<=;)', code):
            naming = NAMING.match(stmt)
            for c in re.finditer(r'\blease_fence\.(\w+)\s*\(', stmt):
                count += 1
                name = c.group(1)
                depth, j = 1, c.end()
                while j < len(stmt) and depth:
                    depth += {'(': 1, ')': -1}.get(stmt[j], 0)
                    j += 1
                inner = stmt[c.end():j - 1]
                lineno = start + code[:pos + c.start()].count('\n')
                shown = block[pos + c.end():pos + j - 1]           # as written, strings and all
                where = f'{rel}:{lineno}: lease_fence.{name}(' + ' '.join(shown.split()) + ')'
                if name not in funcs:
                    bad.append(f'{where} (no function {name})')
                    continue
                before = stmt[:c.start()]
                if (re.search(r'EXECUTE\s+(FUNCTION|PROCEDURE)\s*$', before, re.I)
                        or re.match(r'\s*RETURNS\b', stmt[j:], re.I) or (naming and older)):
                    continue
                args = [a.strip() for a in split_top(inner)]
                if depth:
                    bad.append(f'{where} (no closing parenthesis)')
                elif naming:
                    types = [TYPE_ALIASES.get(a.lower(), a.lower()) for a in args]
                    if not any(types == [t for _, t, _ in ins] for ins in overloads(funcs[name])):
                        bad.append(f'{where} (no {name} takes exactly these types: '
                                   + ' or '.join('(' + ', '.join(t for _, t, _ in ins) + ')'
                                                 for ins in overloads(funcs[name])) + ')')
                elif not any(call_fits(ins, args) for ins in overloads(funcs[name])):
                    bad.append(f'{where} (no {name} takes these arguments: '
                               + ' or '.join('(' + ', '.join((n or '?') + ('=' if d else '') for n, _, d in ins) + ')'
                                             for ins in overloads(funcs[name])) + ')')
            pos += len(stmt)
    return bad, count


PORTABLE_PAGES = {os.path.join('docs', 'managed.md')}


def check_sql_calls(root, catalog, portable, res):
    paths = [os.path.join(root, 'README.md')] + sorted(
        os.path.join(dp, n) for dp, _, fs in os.walk(os.path.join(root, 'docs')) for n in fs if n.endswith('.md'))
    version = default_version(root) if os.path.exists(os.path.join(root, 'lease_fence.control')) else None
    bad, count = [], 0
    for path in paths:
        funcs = portable[0] if os.path.relpath(path, root) in PORTABLE_PAGES else catalog[0]
        b, c = sql_call_problems(root, path, funcs, version)
        bad += b
        count += c
    res.check(not bad and count > 0,
              f'sql blocks: every lease_fence function a sql block of README.md and docs/ calls or names '
              f'exists, with arguments it takes ({count} calls)',
              '; '.join(bad[:20]) + (f' ... and {len(bad) - 20} more' if len(bad) > 20 else ''))


# ---------------------------------------------------------------- the layers

LAYER_FOLDERS = ['lease', 'redis', 'fence', 'base']    # as the picture runs: top first
GENERATED = {'redis/lua_scripts.h'}                     # made by the build


def layer_picture(root):
    """The files docs/design.md's picture of the layers names, as paths under
    src/ in the order written, and the folders in their order."""
    with open(os.path.join(root, 'docs', 'design.md'), encoding='utf-8') as f:
        text = f.read()
    m = re.search(r'^## The layers\n.*?^```\n(.*?)^```', text, re.M | re.S)
    if not m:
        return [], []
    files, folders, folder = [], [], None
    for line in m.group(1).splitlines():
        top = re.match(r'^src/(\S+)', line)
        if top:
            name = top.group(1)
            if name.endswith('/'):
                folder = name.rstrip('/')
                folders.append(folder)
            else:
                folder = None
                files.append(name)
            continue
        inner = re.match(r'^\s{2,}(\S+\.[ch])\s', line + ' ')
        if inner and folder:
            files.append(f'{folder}/{inner.group(1)}')
    return files, folders


def check_layers(root, res):
    named, folders = layer_picture(root)
    src = os.path.join(root, 'src')
    present = sorted(os.path.relpath(os.path.join(dp, n), src)
                     for dp, _, fs in os.walk(src) for n in fs
                     if n.endswith(('.c', '.h')))
    present = [p for p in present if p not in GENERATED]
    missing = [p for p in present if p not in named]
    stale = [p for p in named if p not in present]
    twice = sorted({p for p in named if named.count(p) > 1})
    res.check(named and not missing and not stale and not twice and folders == LAYER_FOLDERS,
              f'layers: docs/design.md\'s picture names every file of src/, each in its folder ({len(named)} files)',
              '; '.join(filter(None, [
                  missing and f'not in the picture: {", ".join(missing)}',
                  stale and f'in the picture but not in src/: {", ".join(stale)}',
                  twice and f'named twice: {", ".join(twice)}',
                  folders != LAYER_FOLDERS and f'folders {folders}, expected {LAYER_FOLDERS}'])))


def run_checks(root, catalog_path, portable_path):
    res = Result()
    check_reference(root, read_catalog(catalog_path), res)
    check_sql_calls(root, read_catalog(catalog_path), read_catalog(portable_path), res)
    check_links(root, res)
    check_layers(root, res)
    return res


# ---------------------------------------------------------------- self-test

def self_test(root, catalog_path, portable_path, res):
    """Break the documentation of a copy of the tree in each way the checks
    must refuse, and show that they do (and, of the checks of its kind, only
    the one concerned)."""
    funcs, views, others, settings = read_catalog(catalog_path)
    fn = sorted(funcs)[0]
    view = sorted(views)[0]
    col = views[view][-1]
    setting = sorted(settings)[0]
    code = sorted(read_sqlstates(root))[0]

    def edit(rel, how):
        def apply(copy):
            p = os.path.join(copy, rel)
            with open(p, encoding='utf-8') as f:
                text = f.read()
            new = how(text)
            if new == text:
                raise RuntimeError(f'self-test: the edit of {rel} changed nothing')
            with open(p, 'w', encoding='utf-8') as f:
                f.write(new)
        return apply

    ref = os.path.join('docs', 'reference.md')
    drop_line = lambda pattern: lambda t: re.sub(pattern, '', t, count=1, flags=re.M)
    cases = [
        (f'a function without its heading (lease_fence.{fn})', 'every function',
         edit(ref, drop_line(r'^###\s+`?lease_fence\.' + fn + r'`?\s*\n'))),
        (f'a function whose signature is not the catalog\'s (lease_fence.{fn})', 'every function',
         edit(ref, lambda t: t.replace(f'lease_fence.{fn}({funcs[fn][0]})',
                                       f'lease_fence.{fn}({funcs[fn][0]}, extra int)'))),
        (f'a view column without its row ({view}.{col})', 'every view',
         edit(ref, drop_line(r'^\|\s*`' + col + r'`\s*\|.*\n'))),
        (f'a setting without its row ({setting})', 'every setting',
         edit(ref, drop_line(r'^\|\s*`' + re.escape(setting) + r'`.*\n'))),
        (f'a setting with a wrong default ({setting})', 'every setting',
         edit(ref, lambda t: re.sub(r'^(\|\s*`' + re.escape(setting) + r'`\s*\|\s*`[^`]*`\s*\|\s*`)[^`]*`',
                                    r'\1no such default`', t, count=1, flags=re.M))),
        (f'a SQLSTATE without its row ({code})', 'every SQLSTATE',
         edit(ref, drop_line(r'^\|\s*`' + code + r'`\s*\|.*\n'))),
        ('a heading for a function that does not exist', 'no heading for a function',
         edit(ref, lambda t: t + '\n### lease_fence.no_such_function\n')),
        ('a function renamed in a doc\'s sql block (lease_fence.protect in README.md)', 'sql blocks',
         edit('README.md', lambda t: t.replace("SELECT lease_fence.protect('account');",
                                               "SELECT lease_fence.protect_table('account');", 1))),
        ('a call with more arguments than the function takes (lease_fence.next_generation)', 'sql blocks',
         edit('README.md', lambda t: t.replace('SELECT lease_fence.next_generation();',
                                               'SELECT lease_fence.next_generation(1);', 1))),
        ('a named argument the function does not have (lease_fence.acquire)', 'sql blocks',
         edit('README.md', lambda t: t.replace("ttl_ms => 30000) \\gset", "ttl => 30000) \\gset", 1))),
        ('a GRANT that names argument types no overload has (lease_fence.renew in docs/security.md)', 'sql blocks',
         edit(os.path.join('docs', 'security.md'), lambda t: t.replace('lease_fence.renew(text, text, bigint, bigint)',
                                                                       'lease_fence.renew(text, text, bigint)', 1))),
        ('a C edition function on the portable edition\'s page (lease_fence.acquire in docs/managed.md)', 'sql blocks',
         edit(os.path.join('docs', 'managed.md'),
              lambda t: t.replace('SELECT lease_fence.wal_timeline();', "SELECT lease_fence.acquire('r', 1000);", 1))),
        ('a link to a file that does not exist', 'links',
         edit('README.md', lambda t: t + '\nSee [nothing](docs/no-such-file.md).\n')),
        ('a link to an anchor that does not exist', 'links',
         edit('README.md', lambda t: t + '\nSee [nowhere](docs/reference.md#no-such-anchor).\n')),
        ('a file of src/ the layers\' picture does not name', 'layers',
         lambda copy: open(os.path.join(copy, 'src', 'redis', 'redis_probe.c'), 'w').close()),
        ('a file the layers\' picture names in the wrong folder', 'layers',
         edit(os.path.join('docs', 'design.md'),
              lambda t: t.replace('    redis_tls.c ', '    probe_tls.c ', 1).replace(
                  '    fence_trigger.c ', '    redis_tls.c\n    fence_trigger.c ', 1))),
    ]
    for what, which, apply in cases:
        copy = tempfile.mkdtemp(prefix='lf_docs_check.')
        try:
            for top in ('README.md', 'docs', 'src', 'portable'):
                s = os.path.join(root, top)
                if os.path.isdir(s):
                    shutil.copytree(s, os.path.join(copy, top))
                elif os.path.exists(s):
                    shutil.copy(s, copy)
            for n in os.listdir(root):
                if re.match(r'lease_fence--.*\.sql$|lease_fence\.control$', n):
                    shutil.copy(os.path.join(root, n), copy)
            # the copy has only those: links elsewhere are not this case's
            apply(copy)
            failed = []
            q = Result()
            q.check = lambda good, name, why='': None if good else failed.append(name)
            # (a removed heading may break links to it: each case runs the
            # checks of its own kind, reference or links)
            if which == 'links':
                check_reference_links_only(copy, q)
            elif which == 'layers':
                check_layers(copy, q)
            elif which == 'sql blocks':
                check_sql_calls(copy, read_catalog(catalog_path), read_catalog(portable_path), q)
            else:
                check_reference(copy, read_catalog(catalog_path), q)
            concerned = [n for n in failed if which in n]
            res.check(concerned and len(failed) == len(concerned),
                      f'self-test: {what} is refused',
                      f'failed checks: {failed or "none"}')
        finally:
            shutil.rmtree(copy, ignore_errors=True)


def check_reference_links_only(copy, res):
    """The link check on the self-test's copy: README.md and docs/ only, and
    only their links into those (the rest of the tree is not copied)."""
    docs = os.path.join(copy, 'docs')
    readme = os.path.join(copy, 'README.md')
    paths = [readme] + sorted(os.path.join(dp, n) for dp, _, fs in os.walk(docs)
                              for n in fs if n.endswith('.md'))
    inside = lambda dest: dest == readme or dest.startswith(docs + os.sep) or dest.endswith('no-such-file.md')
    broken, _ = broken_links(paths, copy, inside)
    res.check(not broken, 'links', ', '.join(broken))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--root')
    ap.add_argument('--catalog')
    ap.add_argument('--portable-catalog', help='the F lines of a database with the portable edition')
    ap.add_argument('--self-test', action='store_true')
    ap.add_argument('--dump-sql', action='store_true', help='print the catalog query and exit')
    ap.add_argument('--dump-portable-sql', action='store_true',
                    help='print the portable edition\'s catalog query and exit')
    a = ap.parse_args()
    if a.dump_sql:
        print(DUMP_SQL)
        return 0
    if a.dump_portable_sql:
        print(DUMP_PORTABLE_SQL)
        return 0
    if not a.root or not a.catalog or not a.portable_catalog:
        ap.error('--root, --catalog and --portable-catalog are needed')
    res = run_checks(a.root, a.catalog, a.portable_catalog)
    if a.self_test:
        self_test(a.root, a.catalog, a.portable_catalog, res)
    print(f'docs: {res.ok} passed, {res.bad} failed')
    return 1 if res.bad else 0


if __name__ == '__main__':
    sys.exit(main())
