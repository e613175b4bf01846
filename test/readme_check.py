#!/usr/bin/python3
"""test/readme_check.py — take the README's set-up and examples out of
README.md, as a reader copies them, for test/run.sh's "readme" suite.

  readme_check.py README.md OUTDIR
  readme_check.py --block NAME FILE      print the block after
                                         "<!-- check: NAME -->" in FILE

writes into OUTDIR
  setup.sh      the "Set up" block (checked with bash -n; it installs
                packages and restarts the system's PostgreSQL, which a test
                must not do: test/run.sh builds and installs the same way)
  setup.sql     the SQL that block runs as the postgres superuser (its
                <<'SQL' here-document), run as it is
  settings.txt  the postgresql.conf lines it writes (<<'EOF'), one per line
  example.sql   the worked example in SQL, for psql, as it is
  fenced.py     the Python example, with "host=127.0.0.1 " taken out of its
                connection string: the test's server listens on a unix socket
                only (PGHOST, PGPORT); nothing else is changed
  expected.txt  what the README says the example prints

The blocks are the fenced code blocks right after the comments
"<!-- check: setup -->", "<!-- check: sql -->" and "<!-- check: python -->"; the
expected output is the next fenced block after the Python one.  Exits 1,
saying what is missing, when any part cannot be found.
"""

import os
import re
import sys


def block_after(lines, start):
    """The body of the first fenced code block at or after line start, and the
    index of the line after it."""
    i = start
    while i < len(lines) and not lines[i].startswith('```'):
        i += 1
    if i == len(lines):
        return None, i
    body = []
    i += 1
    while i < len(lines) and not lines[i].startswith('```'):
        body.append(lines[i])
        i += 1
    return body, i + 1


def heredoc(body, word):
    """The lines of the here-document "<<'WORD'" in body."""
    out, inside = [], False
    for line in body:
        if inside:
            if line.strip() == word:
                return out
            out.append(line)
        elif re.search(r"<<-?'" + word + r"'\s*$", line):
            inside = True
    return None


def main():
    if sys.argv[1] == '--block':
        name, path = sys.argv[2], sys.argv[3]
        with open(path, encoding='utf-8') as f:
            lines = f.read().split('\n')
        for i, line in enumerate(lines):
            if line.strip() == f'<!-- check: {name} -->':
                body, _ = block_after(lines, i + 1)
                if body:
                    print('\n'.join(body))
                    return 0
        print(f'no "<!-- check: {name} -->" block in {path}', file=sys.stderr)
        return 1
    readme, outdir = sys.argv[1], sys.argv[2]
    with open(readme, encoding='utf-8') as f:
        lines = f.read().split('\n')
    parts = {}
    for i, line in enumerate(lines):
        m = re.match(r'^<!-- check: ([\w-]+) -->$', line.strip())
        if m:
            body, after = block_after(lines, i + 1)
            parts[m.group(1)] = body
            if m.group(1) == 'python':
                parts['expected'], _ = block_after(lines, after)
    problems = [f'no "<!-- check: {k} -->" block' for k in ('setup', 'sql', 'python') if not parts.get(k)]
    if problems:
        print('\n'.join(problems))
        return 1
    sql = heredoc(parts['setup'], 'SQL')
    conf = heredoc(parts['setup'], 'EOF')
    if sql is None or conf is None:
        print("the set-up block has no <<'SQL' or no <<'EOF' here-document")
        return 1
    python = '\n'.join(parts['python'])
    if 'host=127.0.0.1 ' not in python:
        print('the Python example does not connect with "host=127.0.0.1 ..."')
        return 1
    python = python.replace('host=127.0.0.1 ', '', 1)
    files = {
        'setup.sh': '\n'.join(parts['setup']) + '\n',
        'setup.sql': '\n'.join(sql) + '\n',
        'settings.txt': '\n'.join(conf) + '\n',
        'example.sql': '\n'.join(parts['sql']) + '\n',
        'fenced.py': python + '\n',
        'expected.txt': '\n'.join(parts['expected'] or []) + '\n',
    }
    for name, text in files.items():
        with open(os.path.join(outdir, name), 'w', encoding='utf-8') as f:
            f.write(text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
