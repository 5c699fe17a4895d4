#!/usr/bin/env python3
"""Where each millisecond of a change goes, from the folded stacks of `make profile`.

Every sampled stack is given to one category: the first in CATEGORIES (highest priority first) that
any frame of the stack belongs to. Priority goes to what a stack is for, not to its leaf: a
`malloc` under `serde_json` is JSON work, JSON written by the log formatter is logging. A category's
share of the samples times the bench's CPU per change of that replica is its milliseconds per change.
"""

import argparse
import json
import re
from collections import Counter

# (category, pattern matched against each frame), highest priority first. A frame of an instrumented
# future (`tracing::instrument::Instrumented`) only carries a span through an await: it is not logging,
# and everything a reconcile does runs under one.
IGNORED = re.compile(r"tracing::instrument::Instrumented")
CATEGORIES = [
    ("logging (tracing)", r"tracing_subscriber|tracing_core|tracing::"),
    ("metrics", r"prometheus_client|cmset_controller::(platform::)?metrics"),
    ("TLS (rustls, ring)", r"rustls|\bring::|aws_lc"),
    ("JSON encode / decode (serde)", r"serde_json|serde::|serde_path_to_error|_serde::"),
    ("hashing (sha2)", r"sha2::|sha256"),
    ("admission webhook", r"cmset_controller::(serving::)?webhook|cmset_core::admission"),
    ("index and stores", r"cmset_controller::(engine::)?(index|stores|views)"),
    ("planning (cmset_core)", r"cmset_core::"),
    ("reconcile I/O (set and workload controllers)",
     r"cmset_controller::(reconcile::)?(set_controller|workload_controller|decisions)"),
    ("kube watch and client", r"kube_runtime|kube_client"),
    ("HTTP (hyper, h2)", r"\bhyper|\bh2::|\bhttp::|tower"),
    ("allocation", r"malloc|\bfree\b|realloc|_int_free|cfree|__rust_alloc|__rust_dealloc"),
    ("async runtime and syscalls", r"tokio::|mio::|epoll|futex|\[k\]|syscall"),
]
COMPILED = [(name, re.compile(pattern)) for name, pattern in CATEGORIES]
OTHER = "other"


def read_folded(path):
    stacks = Counter()
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            frames, _, count = line.rpartition(" ")
            stacks[frames] += int(count)
    return stacks


def categorise(frames):
    split = frames.split(";")
    for name, pattern in COMPILED:
        if any(pattern.search(frame) and not IGNORED.search(frame) for frame in split):
            return name
    return OTHER


def leaf(frames):
    return frames.rsplit(";", 1)[-1]


def table(role, stacks, ms_per_change):
    # The folded counts are perf's sample periods, so shares are shares of CPU time.
    total = sum(stacks.values())
    distinct = len(stacks)
    by_category = Counter()
    by_leaf = Counter()
    for frames, count in stacks.items():
        by_category[categorise(frames)] += count
        by_leaf[leaf(frames)] += count
    lines = [
        f"### {role}: {ms_per_change:.2f} ms CPU per change (bench), {distinct} distinct stacks sampled",
        "",
        "| where | share | ms per change |",
        "| --- | ---: | ---: |",
    ]
    for name in [n for n, _ in CATEGORIES] + [OTHER]:
        count = by_category.get(name, 0)
        if count == 0:
            continue
        share = count / total if total else 0.0
        lines.append(f"| {name} | {share:.1%} | {share * ms_per_change:.2f} |")
    lines += ["", f"Hottest leaf functions of the {role} (self time):", "",
              "| function | share |", "| --- | ---: |"]
    for function, count in by_leaf.most_common(12):
        name = function if len(function) <= 110 else function[:107] + "..."
        name = name.replace("|", "\\|")
        lines.append(f"| `{name}` | {count / total:.1%} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", required=True, help="the bench's results.json")
    parser.add_argument("--leader", required=True, help="the leader's folded stacks")
    parser.add_argument("--standby", required=True, help="the standby's folded stacks")
    args = parser.parse_args()
    with open(args.results) as f:
        results = json.load(f)
    configuration = results["configurations"][0]
    cost = (configuration.get("churn") or {}).get("cost") or {}
    by_role = cost.get("cpu_ms_per_change_by_role") or {}
    meta = results.get("meta", {})
    print(f"## Where a change's CPU goes: steady churn, configuration `{configuration['name']}`\n")
    print(f"commit `{meta.get('commit', '?')}`; {meta.get('operator', '')}\n")
    print("Each sampled stack counts once, for the first category (in this order) that any of its "
          "frames belongs to; its share of the samples times the bench's CPU per change of that "
          "replica gives its milliseconds per change.\n")
    for role in ("leader", "standby"):
        stacks = read_folded(getattr(args, role))
        print(table(role, stacks, float(by_role.get(role, 0.0))))


if __name__ == "__main__":
    main()
