#!/usr/bin/env python3
"""scripts/include_graph.py - include cycles between src/'s modules.

A module is a file stem: X.c and X.h together, in src/ or one of its layer
folders (src/store/X.c: the stem is still X, since every folder is an
include directory and an #include names a header alone). Module X depends on
module Y when X.c or X.h has `#include "Y.h"`. The script builds that graph,
finds its strongly-connected components (Tarjan) and prints every one of more
than one module: modules that cannot be understood, tested or moved apart.

It also checks that includes point down the layers: src/'s folders in
LAYERS order, lowest first, with src/ itself on top. A file may include a
header of its own folder or of a lower one; an `#include "x.h"` of a higher
layer's header is printed as FILE:LINE and fails, unless UPWARD allows it.
A folder of src/ not in LAYERS (or a LAYERS entry with no folder) fails too.

And it checks that above decide/ a request's slot (struct cmd_slot,
decide/cmd.h) is touched only through its caller's head, SLOT_PUBLIC: the
rest is decide/'s own state, from cmd_execute to the completion, embedded in
the caller's request only to spare an allocation per request.

It exits 1 when a cycle is not on ALLOWED below, or when an ALLOWED entry no
longer matches a cycle (then the entry should go: the list only shrinks).
The suite runs it (meson test 'include-cycles', suite style).

usage: scripts/include_graph.py [SRC_DIR]     (default: src/ beside scripts/)
       scripts/include_graph.py --edges [SRC_DIR]   also print every edge
"""
import os
import re
import sys

# Cycles known and accepted for now, each the exact set of its modules, with
# why. The goal is an empty list; take an entry out when its cycle is broken.
ALLOWED = [
    # (none: keep it so. A cycle to live with goes here as
    # (['module', 'module', ...], 'why'), until it is broken.)
]

# src/'s folders, lowest layer first (docs/architecture.md, "Layers");
# src/ itself (main, server, metrics, status) is above them all.
LAYERS = ['lib', 'model', 'config', 'ops', 'store', 'decide', 'proto', 'grpc', 'net']

# Upward includes known and accepted for now, each ('file', 'header', 'why')
# with the including file's path under src/. The goal is an empty list.
UPWARD = [
    # (none: keep it so.)
]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def source_files(src):
    """{file stem: [paths of its .c and .h]}, over src/ and its folders."""
    files = {}
    for d, dirs, names in os.walk(src):
        dirs.sort()
        for name in sorted(names):
            stem, ext = os.path.splitext(name)
            if ext in ('.c', '.h'):
                files.setdefault(stem, []).append(os.path.join(d, name))
    return files


def module_graph(src):
    """{module: set of modules it includes}, over src/**/*.c and *.h."""
    files = source_files(src)
    mods = {stem: set() for stem in files}
    for stem, deps in mods.items():
        for path in files[stem]:
            with open(path, encoding='utf-8') as f:
                for line in f:
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    dep = os.path.splitext(os.path.basename(m.group(1)))[0]
                    if dep in mods and dep != stem:
                        deps.add(dep)
    return mods


def layer_of(src, path):
    """The layer index of a file under src/: its folder's place in LAYERS,
    len(LAYERS) for src/ itself, None for a folder LAYERS does not name."""
    rel = os.path.relpath(os.path.dirname(path), src)
    if rel == '.':
        return len(LAYERS)
    top = rel.split(os.sep)[0]
    return LAYERS.index(top) if top in LAYERS else None


def upward_includes(src):
    """(problems, count of includes checked): every include of a higher
    layer's header, as 'FILE:LINE: ...' lines, and every folder out of
    LAYERS."""
    problems = []
    folders = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    # a folder without C (src/store/lua/) is nobody's layer
    folders = [d for d in folders if any(n.endswith(('.c', '.h'))
                                         for _d, _s, ns in os.walk(os.path.join(src, d))
                                         for n in ns)]
    for d in folders:
        if d not in LAYERS:
            problems.append(f'src/{d}/: a folder that is not in LAYERS (scripts/include_graph.py)')
    for d in LAYERS:
        if d not in folders:
            problems.append(f'LAYERS names {d}, which is not a folder of src/ with C files')
    headers = {}
    for paths in source_files(src).values():
        for p in paths:
            if p.endswith('.h'):
                headers[os.path.basename(p)] = p
    allowed = {(f, h) for f, h, _why in UPWARD}
    used = set()
    checked = 0
    for paths in source_files(src).values():
        for path in paths:
            mine = layer_of(src, path)
            if mine is None:
                continue
            rel = os.path.relpath(path, src).replace(os.sep, '/')
            with open(path, encoding='utf-8') as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or os.path.basename(m.group(1)) not in headers:
                        continue
                    checked += 1
                    hdr = headers[os.path.basename(m.group(1))]
                    theirs = layer_of(src, hdr)
                    if theirs is None or theirs <= mine:
                        continue
                    hrel = os.path.relpath(hdr, src).replace(os.sep, '/')
                    if (rel, os.path.basename(hdr)) in allowed:
                        used.add((rel, os.path.basename(hdr)))
                        continue
                    problems.append(f'src/{rel}:{n}: includes {m.group(1)} (src/{hrel}), '
                                    f'a higher layer ({layer_name(mine)} < {layer_name(theirs)})')
    for f, h in sorted(allowed - used):
        problems.append(f'STALE UPWARD entry (no such include now; remove it): {f} -> {h}')
    return problems, checked


# The fields of struct cmd_slot a file outside src/decide/ may name: the
# caller's head (cmd_slot_init sets it up; res is the answer).
SLOT_PUBLIC = {'res', 'complete', 'front', 'names_policy'}
SLOT_USE = re.compile(r'\bslot\s*(?:\.|->)\s*([A-Za-z_]\w*)')


def slot_private_uses(src):
    """FILE:LINE of every use of a slot's private field above decide/."""
    problems = []
    for path in sorted(p for paths in source_files(src).values() for p in paths):
        rel = os.path.relpath(path, src)
        if rel.startswith('decide' + os.sep) or not path.endswith('.c'):
            continue
        with open(path, encoding='utf-8') as f:
            for n, line in enumerate(f, 1):
                for m in SLOT_USE.finditer(line):
                    if m.group(1) not in SLOT_PUBLIC:
                        problems.append(f'{rel}:{n}: a slot\'s {m.group(1)} is decide/\'s own '
                                        f'(struct cmd_slot: {", ".join(sorted(SLOT_PUBLIC))} '
                                        f'are the caller\'s)')
    return problems


def layer_name(i):
    return LAYERS[i] if i < len(LAYERS) else 'src/'


def sccs(graph):
    """Tarjan's strongly-connected components, iteratively (no recursion
    limit to meet)."""
    index = {}
    low = {}
    on_stack = set()
    stack = []
    out = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def main(argv):
    edges = '--edges' in argv
    args = [a for a in argv if a != '--edges']
    src = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..',
                                            'src')
    graph = module_graph(src)
    if edges:
        for m in sorted(graph):
            print(f'{m} -> {" ".join(sorted(graph[m]))}')
    cycles = sorted((c for c in sccs(graph) if len(c) > 1), key=lambda c: (-len(c), sorted(c)))
    allowed = [frozenset(a) for a, _why in ALLOWED]
    bad = 0
    for c in cycles:
        ok = frozenset(c) in allowed
        bad += not ok
        print(f'{"allowed" if ok else "CYCLE"} ({len(c)} modules): {" ".join(sorted(c))}')
        for m in sorted(c):
            inside = sorted(graph[m] & c)
            print(f'    {m} -> {" ".join(inside)}')
    found = [frozenset(c) for c in cycles]
    for a in allowed:
        if a not in found:
            bad += 1
            print(f'STALE allow-list entry (no such cycle now; remove it): {" ".join(sorted(a))}')
    if not cycles:
        print('no include cycle between modules')
    problems, checked = upward_includes(src)
    for p in problems:
        print(p)
    bad += len(problems)
    if not problems:
        print(f'every include points down the layers ({checked} includes, '
              f'{" < ".join(LAYERS)} < src/)')
    private = slot_private_uses(src)
    for p in private:
        print(p)
    bad += len(private)
    if not private:
        print('above decide/, a slot is touched only through its head ('
              f'{", ".join(sorted(SLOT_PUBLIC))})')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
