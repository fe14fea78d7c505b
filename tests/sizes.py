#!/usr/bin/env python3
# The sizes a newcomer can hold in the head, for t_layering: no source
# file of the daemon, the protocol or the client over 700 lines, no
# function over 80, no struct over 25 fields. tests/size-allowances lists
# the offenders still allowed, exactly as this prints them; a listed one
# that is gone or smaller fails too, so the list only ever shrinks.
#
# usage: sizes.py [ALLOWANCES]   (run from the repository's top)
import glob
import re
import sys

MAX_LINES, MAX_FUNC, MAX_FIELDS = 700, 80, 25


def fields(body):
	"""Members of a struct body: declarations ending in ';' at its top
	level, a nested struct or union counting as one."""
	depth, n = 0, 0
	for l in body:
		s = re.sub(r'/\*.*?\*/|//.*', '', l).strip()
		if not s or s.startswith('#'):
			continue
		opens, closes = s.count('{'), s.count('}')
		if depth == 0 and s.endswith(';') and not opens:
			n += 1
		depth += opens - closes
		if depth == 0 and closes and s.endswith(';'):
			n += 1
	return n


def check(f):
	out = []
	lines = open(f, encoding='utf-8', errors='replace').read().split('\n')
	if lines and lines[-1] == '':
		lines.pop()
	if len(lines) > MAX_LINES:
		out.append(f'{f}: {len(lines)} lines')
	start = name = None
	prev = ''
	for i, l in enumerate(lines):
		m = re.match(r'^([a-z_][a-z0-9_]*)\(', l)
		if m and not prev.rstrip().endswith(';'):
			start, name = i, m.group(1)
		elif l.startswith('}') and start is not None:
			if i - start > MAX_FUNC:
				out.append(f'{f}: {name}() {i - start} lines')
			start = None
		prev = l
	for i, l in enumerate(lines):
		m = re.match(r'^(?:typedef\s+)?struct\s+([a-z_][a-z0-9_]*)\s*\{\s*$', l)
		if not m:
			continue
		j = i + 1
		while j < len(lines) and not lines[j].startswith('}'):
			j += 1
		n = fields(lines[i + 1:j])
		if n > MAX_FIELDS:
			out.append(f'{f}: struct {m.group(1)} {n} fields')
	return out


files = sorted(set(glob.glob('daemon/**/*.[ch]', recursive=True) +
		   glob.glob('proto/**/*.[ch]', recursive=True) +
		   glob.glob('client/**/*.[ch]', recursive=True)))
found = [b for f in files for b in check(f)]
if len(sys.argv) < 2:
	print('\n'.join(found))
	sys.exit(0)
allowed = [l.strip() for l in open(sys.argv[1])
	   if l.strip() and not l.startswith('#')]
bad = 0
for b in found:
	if b not in allowed:
		print(f'FAIL: over the limits and not allowed: {b}')
		bad = 1
for a in allowed:
	if a not in found:
		print(f'FAIL: allowed but gone or changed (update {sys.argv[1]}): {a}')
		bad = 1
print(f'{len(files)} files; {len(found)} over the limits, all allowed'
      if not bad else f'{len(files)} files; {len(found)} over the limits')
sys.exit(bad)
