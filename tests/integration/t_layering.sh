#!/usr/bin/env bash
# The code stays in parts a newcomer can hold in the head: no source file
# of the daemon, the protocol or the client over 700 lines, no function
# over 80, no struct over 25 fields (tests/sizes.py, but for the offenders
# tests/size-allowances still lists), and no include circle among the
# daemon's files (a part that includes another part's header is never
# included back, directly or through others); calls only down the layers
# tests/layers declares, the picture of them in docs/design.md true, and
# no call circle beyond tests/layering-circles.
. "$SRC/tests/lib.sh"
command -v python3 >/dev/null || skip "python3 missing"
cd "$SRC"
python3 tests/sizes.py tests/size-allowances >"$T/sizes" ||
	fail "sizes: $(cat "$T/sizes")"
info "sizes: $(tail -1 "$T/sizes")"
python3 - <<'PY' || fail "layering: see above"
import glob, os, re, sys

bad = []
edges = {}
for f in glob.glob('daemon/**/*.[ch]', recursive=True):
    mod = os.path.splitext(os.path.relpath(f, 'daemon'))[0]
    for inc in re.findall(r'#include "daemon/([^"]+)\.h"', open(f).read()):
        if inc != mod:
            edges.setdefault(mod, set()).add(inc)
state, stack = {}, []
def walk(u):
    state[u] = 1
    stack.append(u)
    for v in sorted(edges.get(u, ())):
        if state.get(v) == 1:
            bad.append('include circle: ' + ' -> '.join(stack[stack.index(v):] + [v]))
        elif not state.get(v):
            walk(v)
    stack.pop()
    state[u] = 2
for u in sorted(edges):
    if not state.get(u):
        walk(u)
for b in bad:
    print('FAIL: ' + b)
print(f'{len(edges)} daemon modules with includes, {len(bad)} problems')
sys.exit(1 if bad else 0)
PY
info "no include circle"

# Calls: the layers of tests/layers in their direction, the picture in
# docs/design.md made from the objects, and no call circle but those
# tests/layering-circles still lists.
command -v nm >/dev/null || skip "nm missing (binutils)"
python3 "$SRC/tests/callgraph.py" "$B" circles "$SRC/tests/layers" >"$T/circles" ||
	fail "callgraph: $(cat "$T/circles")"
grep '^against the layers' "$T/circles" && fail "calls against the declared layers (above)"
{ grep -v '^#' "$SRC/tests/layering-circles" || true; } >"$T/listed"
diff -u "$T/listed" "$T/circles" >"$T/circles.diff" ||
	fail "call circles differ from tests/layering-circles (+ new or changed, - gone: update the list): $(cat "$T/circles.diff")"
python3 "$SRC/tests/callgraph.py" "$B" dot "$SRC/tests/layers" >"$T/layers.dot"
sed -n '/^<!-- layers: /,/^<!-- end of layers -->/p' "$SRC/docs/design.md" |
	sed '1,2d;$d' | sed '$d' >"$T/doc.dot"
diff -u "$T/doc.dot" "$T/layers.dot" >"$T/dot.diff" ||
	fail "docs/design.md's layer picture is not the code's: $(cat "$T/dot.diff")"
# And each role's parts, drawn the same way.
for role in dest source; do
	python3 "$SRC/tests/callgraph.py" "$B" dot "$SRC/tests/layers" "$role" \
		>"$T/$role.dot"
	sed -n "/^<!-- layers of $role: /,/^<!-- end of layers of $role -->/p" \
		"$SRC/docs/design.md" | sed '1,2d;$d' | sed '$d' >"$T/doc-$role.dot"
	[ -s "$T/doc-$role.dot" ] || fail "docs/design.md draws no parts of $role"
	diff -u "$T/doc-$role.dot" "$T/$role.dot" >"$T/$role.diff" ||
		fail "docs/design.md's picture of $role's parts is not the code's: $(cat "$T/$role.diff")"
done
info "calls: no call against the layers; $(wc -l <"$T/circles") circles, as listed; the pictures are the code's"
