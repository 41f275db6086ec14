"""Reads a clock-callers count file (shim.c's output) and prints the clock reads per call
by caller: each stack resolved with addr2line, std/core frames skipped, the first five
frames left as the key.

    python3 resolve.py COUNTS-FILE CALLS
"""
import sys, subprocess, collections, re
path, calls = sys.argv[1], int(sys.argv[2])
stacks = []
addrs = collections.defaultdict(set)
for line in open(path):
    parts = line.split()
    cnt = int(parts[0]); frames = []
    for p in parts[1:]:
        mod, off = p.rsplit('+', 1)
        frames.append((mod, off)); addrs[mod].add(off)
    stacks.append((cnt, frames))
names = {}
for mod, offs in addrs.items():
    if 'target/' not in mod:
        for o in offs: names[(mod, o)] = [mod.rsplit('/',1)[-1]]
        continue
    offs = sorted(offs)
    # -a prints each address before its (function, location) pairs; -i adds the inlined
    # frames' pairs. Return addresses point after the call: look up the byte before.
    res = subprocess.run(['addr2line', '-f', '-C', '-i', '-a', '-e', mod] + [hex(int(o,16)-1) for o in offs], capture_output=True, text=True).stdout.splitlines()
    cur = None; fn = False
    for l in res:
        if l.startswith('0x') and re.fullmatch(r'0x[0-9a-f]+', l):
            cur = hex(int(l,16)+1); names[(mod, cur)] = []; fn = True; continue
        if fn: names[(mod, cur)].append(l); fn = False
        else: fn = True
    for o in offs:
        names.setdefault((mod, hex(int(o,16))), ['?'])
skip = re.compile(r'^(std::|core::|<core::|<std::|tokio::runtime::time|tokio::time::|tokio::runtime::scheduler::multi_thread::park|tokio::runtime::driver|libc|libshim|\?|<tokio::time|tokio::runtime::io|<tokio::runtime)')
agg = collections.Counter()
for cnt, frames in stacks:
    fns = []
    for mod, off in frames:
        fns.extend(names.get((mod, hex(int(off,16))), ['?']))
    fns = [re.sub(r'::h[0-9a-f]{16}$','',f) for f in fns]
    fns = [f for f in fns if not f.startswith('libshim')]
    key = []
    for f in fns:
        short = re.sub(r'<[^<>]*>', '', f)
        short = re.sub(r'<[^<>]*>', '', short)
        key.append(short)
    # key: first 5 frames after std/core noise
    k = [f for f in key if not re.match(r'^(std::|core::|\?|libc|clock_gettime|libshim)', f)]
    agg[' <- '.join(k[:5])] += cnt
tot = sum(agg.values())
print(f'total {tot} = {tot/calls:.2f} per call')
for k, v in agg.most_common(25):
    print(f'{v/calls:6.2f}  {k[:400]}')
