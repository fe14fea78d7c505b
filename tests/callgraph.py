#!/usr/bin/env python3
"""Who calls whom among the daemon's object files, read from the objects.

usage: callgraph.py BUILDDIR circles LAYERS   the call circles, one a line,
                                             then the calls against LAYERS
       callgraph.py BUILDDIR dot LAYERS       the layers' graph (docs/design.md)
       callgraph.py BUILDDIR dot LAYERS ROLE  one role's parts (dest, source)
       callgraph.py BUILDDIR edges A B        the symbols file A takes from B

A file is a node (daemon/dest/install.c is "dest/install"); it calls file
B when its object leaves a symbol undefined that B's object defines
(functions and data alike). A circle is a set of files (a strongly
connected component of two or more) each of which reaches every other
through calls; the folders (".", dest, priv, source) are the same at the
level of folders. LAYERS (tests/layers) declares the direction: each
file belongs to the first layer whose pattern matches it, and may call
only into its own layer or one of a higher rank number. A layer named
ROLE.PART is a part of a role (dest.lanes): a part calls no part of
another role, and the graph of the whole shows a role as one node. The layering
test (t_layering) compares the circles with tests/layering-circles and
the picture with docs/design.md's.
"""
import fnmatch
import glob
import os
import subprocess
import sys


def read_objects(build):
    """Defined symbol -> file; file -> undefined symbols."""
    defs, undefs = {}, {}
    top = os.path.join(build, 'daemon')
    for o in sorted(glob.glob(os.path.join(top, '**', 'uffdd-*.o'),
                              recursive=True)):
        rel = os.path.relpath(o, top)
        name = os.path.join(os.path.dirname(rel),
                            os.path.basename(rel)[len('uffdd-'):-2])
        out = subprocess.run(['nm', o], capture_output=True, text=True,
                             check=True).stdout
        undefs[name] = set()
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in 'TDBRC':
                defs[p[2]] = name
            elif len(p) == 2 and p[0] == 'U':
                undefs[name].add(p[1])
    return defs, undefs


def file_edges(defs, undefs):
    edges = {n: set() for n in undefs}
    for n, syms in undefs.items():
        for s in syms:
            d = defs.get(s)
            if d and d != n:
                edges[n].add(d)
    return edges


def folder(name):
    return os.path.dirname(name) or '.'


def folder_edges(edges):
    out = {}
    for n, ds in edges.items():
        for d in ds:
            if folder(n) != folder(d):
                out.setdefault(folder(n), set()).add(folder(d))
    return out


def circles(edges):
    """Tarjan's strongly connected components of two nodes or more."""
    index, low, on, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def read_layers(path):
    """[(rank, name, [patterns])] in the file's order."""
    layers = []
    for line in open(path, encoding='utf-8'):
        line = line.split('#', 1)[0].split()
        if line:
            layers.append((int(line[0]), line[1], line[2:]))
    return layers


def layer_of(layers, name):
    for rank, lname, pats in layers:
        if any(fnmatch.fnmatchcase(name, p) for p in pats):
            return rank, lname
    sys.exit(f'{name}: in no layer of the declaration')


def role(lname):
    """The role a layer is a part of (dest.lanes: dest), or None."""
    return lname.split('.', 1)[0] if '.' in lname else None


def against(edges, layers):
    """Calls into another layer of the same or a lower rank number, and
    calls from one role's parts into the other's."""
    bad = []
    for n in sorted(edges):
        rn, ln = layer_of(layers, n)
        for d in sorted(edges[n]):
            rd, ld = layer_of(layers, d)
            if ld == ln:
                continue
            if rd <= rn or (role(ln) and role(ld) and role(ln) != role(ld)):
                bad.append(f'{n} ({ln}) -> {d} ({ld})')
    return bad


def dot(edges, layers, of=None):
    """The graph of the layers, a role one node; or, of a role, its parts
    (nodes in the declaration's order)."""
    def node(lname):
        return role(lname) or lname if of is None else lname
    used, le = set(), set()
    for n in edges:
        ln = node(layer_of(layers, n)[1])
        if of is not None and role(ln) != of:
            continue
        used.add(ln)
        for d in edges[n]:
            ld = node(layer_of(layers, d)[1])
            if ld != ln and (of is None or role(ld) == of):
                le.add((ln, ld))
    name = 'daemon_layers' if of is None else f'{of}_parts'
    lines = [f'digraph {name} {{']
    for _, lname, _ in layers:
        if node(lname) in used:
            lines.append(f'\t"{node(lname)}";')
            used.discard(node(lname))
    for a, b in sorted(le):
        lines.append(f'\t"{a}" -> "{b}";')
    lines.append('}')
    return '\n'.join(lines)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    defs, undefs = read_objects(sys.argv[1])
    if not undefs:
        sys.exit(f'no daemon objects under {sys.argv[1]}/daemon')
    edges = file_edges(defs, undefs)
    what = sys.argv[2]
    if what == 'circles' and len(sys.argv) == 4:
        for c in circles(edges):
            print('files: ' + ' '.join(c))
        for c in circles(folder_edges(edges)):
            print('folders: ' + ' '.join(c))
        for b in against(edges, read_layers(sys.argv[3])):
            print('against the layers: ' + b)
    elif what == 'dot' and len(sys.argv) in (4, 5):
        print(dot(edges, read_layers(sys.argv[3]),
                  sys.argv[4] if len(sys.argv) == 5 else None))
    elif what == 'edges' and len(sys.argv) == 5:
        a, b = sys.argv[3], sys.argv[4]
        print(' '.join(sorted(s for s in undefs.get(a, ())
                              if defs.get(s) == b)))
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    main()
