#!/usr/bin/env python3
"""Live heap (dhat end bytes) by holder, per added set: dhat_groups.py small.json[.gz] N_small large.json[.gz] N_large.
Each allocation counts to the first frame, from the allocation up, that names a holder."""
import gzip, json, re, sys
from collections import defaultdict

HOLDERS = [
    ("kube-runtime's controllers (scheduler tables, delay queue, runner)", [r"kube_runtime::scheduler", r"kube_runtime::controller", r"kube_runtime::utils", r"delay_queue", r"try_stream::and_then::AndThen"]),
    ("index: revisions", [r"engine::index::revisions"]),
    ("index: graph (readers, names, history links, progress)", [r"engine::index::graph"]),
    ("index: sets", [r"engine::index::sets"]),
    ("index: other", [r"engine::index"]),
    ("set controller's memory (what it wrote)", [r"reconcile::set_controller", r"engine::memory"]),
    ("stored workloads (slim), their watch and store", [r"stored_workload"]),
    ("a watch's store", [r"ConfigMapSet", r"for_each::ForEach<St,Fut,F> as core::future::future::Future>::poll"]),
]
COMPILED = [(name, [re.compile(p) for p in pats]) for name, pats in HOLDERS]

def groups(path):
    d = json.load(gzip.open(path) if path.endswith(".gz") else open(path))
    ftbl = d["ftbl"]
    out = defaultdict(int)
    total = 0
    for pp in d["pps"]:
        eb = pp.get("eb", 0)
        if not eb:
            continue
        total += eb
        name = "other (HTTP, TLS, tokio, decoding, fixed tables)"
        for fi in pp["fs"]:
            f = ftbl[fi]
            hit = next((n for n, ps in COMPILED if any(p.search(f) for p in ps)), None)
            if hit:
                name = hit
                break
        # The stores' code is inlined into the watch task's loop: the workloads' watches run under
        # `Abortable` (a served kind's watch stops with the kind), the sets' do not.
        if name == "a watch's store":
            frames = [ftbl[i] for i in pp["fs"]]
            name = ("stored workloads (slim), their watch and store" if any("abortable::Abortable" in f for f in frames)
                    else "stored sets (kube's store of whole ConfigMapSets), their watch")
        out[name] += eb
    return out, total

a, ta = groups(sys.argv[1]); na = int(sys.argv[2])
b, tb = groups(sys.argv[3]); nb = int(sys.argv[4])
names = sorted(set(a) | set(b), key=lambda n: -(b.get(n, 0) - a.get(n, 0)))
print(f"| holder | at {na} sets | at {nb} sets | per added set |\n| --- | ---: | ---: | ---: |")
for n in names:
    print(f"| {n} | {a.get(n,0):,} | {b.get(n,0):,} | {(b.get(n,0)-a.get(n,0))/(nb-na):,.0f} B |")
print(f"| **total** | {ta:,} | {tb:,} | **{(tb-ta)/(nb-na):,.0f} B ({(tb-ta)/(nb-na)/1024:.2f} KiB)** |")
