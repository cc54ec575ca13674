#!/usr/bin/env python3
"""Median ratio per set and case from tools/bench_sets.sh output, as a Markdown table."""
import json,sys,statistics,re
sets={}
cur=None
for line in open(sys.argv[1]):
    m=re.match(r'# set (\d+) run (\d+) (\S+)',line)
    if m:
        cur=(int(m.group(1)),int(m.group(2)),m.group(3)); continue
    if not line.startswith('{'): continue
    d=json.loads(line)
    key=d['bytes'] if d['case']=='size' else 'resnet50_step'
    sets.setdefault(cur[0],{}).setdefault(key,[]).append((d['ratio'],d.get('planned')))
keys=[k for k in sets[1]]
def name(k):
    if k=='resnet50_step': return k
    return f"{k>>20} MiB" if k>=1<<20 else f"{k>>10} KiB"
print('| case | '+' | '.join(f'set {s}' for s in sorted(sets))+' | range of medians |')
print('|---|'+'---|'*(len(sets)+1))
for k in keys:
    meds=[]
    cells=[]
    for s in sorted(sets):
        v=[r for r,p in sets[s].get(k,[])]
        if not v: cells.append('-'); continue
        med=statistics.median(v); meds.append(med)
        cells.append(f"{med:.2f} ({'/'.join(f'{x:.2f}' for x in v)})")
    print(f'| {name(k)} | '+' | '.join(cells)+f' | {min(meds):.2f}-{max(meds):.2f} |')
allp=all(p for s in sets.values() for v in s.values() for r,p in v)
print('all planned:',allp)
