"""Tables and chart for bench/peer.sh.

Usage: python peer_report.py ROWS.tsv CHART.png

Reads the rows peer.sh wrote (one per run), takes the median over rounds of
each figure per (api, service, concurrency), prints Markdown tables (figures
and ratios against envoyproxy/ratelimit), and draws throughput and p99
against concurrency for every RLS service. Needs matplotlib for the chart.
"""

import csv
import statistics
import sys
from collections import defaultdict

NAMES = {
    "peer": "envoyproxy/ratelimit (Redis)",
    "xa": "extauthz (Redis, fixed_window)",
    "xagcra": "extauthz (Redis, gcra)",
    "xamem": "extauthz (memory store)",
    "base": "extauthz baseline (Redis, fixed_window)",
    "floor": "grpc-go floor (OK, no decision)",
    "xaallot": "extauthz (Redis, fixed_window, allotment)",
    "xaallotgcra": "extauthz (Redis, gcra, allotment)",
}
FIELDS = ["rps", "p50_us", "p99_us", "server_cpu_us", "redis_cpu_us", "load1"]


def load(path):
    runs = defaultdict(list)
    with open(path) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            runs[(row["api"], row["service"], int(row["concurrency"]))].append(row)
    med = {}
    for key, rows in runs.items():
        m = {k: statistics.median(float(r[k]) for r in rows) for k in FIELDS}
        m["errors"] = sum(int(r["errors"]) + int(r["over"]) for r in rows)
        m["cpu"] = m["server_cpu_us"] + m["redis_cpu_us"]
        m["runs"] = len(rows)
        med[key] = m
    return med


def figures(med, api, services):
    print(f"| service ({api}) | concurrency | req/s | p50 µs | p99 µs | server CPU µs/req "
          "| Redis CPU µs/req | total CPU µs/req | not OK | load1 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for svc in services:
        for (a, s, c), m in sorted(med.items(), key=lambda kv: kv[0][2]):
            if a == api and s == svc:
                print(f"| {svc} | {c} | {m['rps']:,.0f} | {m['p50_us']:.0f} | {m['p99_us']:.0f} "
                      f"| {m['server_cpu_us']:.1f} | {m['redis_cpu_us']:.1f} | {m['cpu']:.1f} "
                      f"| {m['errors']} | {m['load1']:.2f} |")
    print()


def ratios(med, svc, ref, api="rls"):
    concs = sorted(c for (a, s, c) in med if a == api and s == svc and (api, ref, c) in med)
    if not concs:
        return
    print(f"Ratios {svc} / {ref} ({api}, medians):")
    print()
    print("| concurrency | throughput | p50 | p99 | server CPU/req | Redis CPU/req | server+Redis CPU/req |")
    print("|---|---|---|---|---|---|---|")
    for c in concs:
        x, p = med[(api, svc, c)], med[(api, ref, c)]

        def r(k):
            return f"{x[k] / p[k]:.2f}×" if p[k] else "–"

        print(f"| {c} | {r('rps')} | {r('p50_us')} | {r('p99_us')} | {r('server_cpu_us')} "
              f"| {r('redis_cpu_us')} | {r('cpu')} |")
    print()


def steal(row):
    """The hypervisor's steal during a run, in percent ("?" in rows from
    before bench/peer.sh recorded it): a neighbour's share, which slows a
    run without showing in its own CPU counts."""
    return row.get("steal_pct") or "?"


def per_round(path, svc, ref, api="rls"):
    """Prints svc/ref throughput and CPU ratios of each round: the spread the
    medians hide."""
    runs = {}
    with open(path) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            runs[(row["round"], row["api"], row["service"], int(row["concurrency"]))] = row
    keys = sorted({(r, c) for (r, a, s, c) in runs if a == api and s == svc and (r, api, ref, c) in runs},
                  key=lambda k: (k[1], int(k[0])))
    if not keys:
        return
    print(f"Per round, {svc} / {ref} ({api}):")
    print()
    print("| concurrency | round | throughput | server+Redis CPU/req | steal % (both runs) |")
    print("|---|---|---|---|---|")
    pairs = defaultdict(list)
    for rnd, c in keys:
        x, p = runs[(rnd, api, svc, c)], runs[(rnd, api, ref, c)]
        cx = float(x["server_cpu_us"]) + float(x["redis_cpu_us"])
        cp = float(p["server_cpu_us"]) + float(p["redis_cpu_us"])
        tr = float(x["rps"]) / float(p["rps"]) if float(p["rps"]) else 0
        cr = cx / cp if cp else 0
        pairs[c].append((tr, cr))
        print(f"| {c} | {rnd} | {tr:.2f}× | {cr:.2f}× | {steal(x)} / {steal(p)} |")
    # The median of the rounds' ratios: each pairs two runs minutes apart,
    # so a machine that drifts over the run moves it less than the ratio of
    # the medians above.
    for c, rs in pairs.items():
        print(f"| {c} | median | **{statistics.median(t for t, _ in rs):.2f}×** "
              f"| **{statistics.median(r for _, r in rs):.2f}×** | |")
    print()


def chart(med, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = list(NAMES)
    hot = sorted(((c, s, m) for (a, s, c), m in med.items() if a == "rlshot"),
                 key=lambda h: (h[0], order.index(h[1]) if h[1] in order else len(order)))
    if hot:
        fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 4.8), gridspec_kw={"width_ratios": [2, 2, 1.4]})
    else:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    styles = {"peer": ("tab:red", "o"), "xa": ("tab:blue", "s"), "xamem": ("tab:green", "^"),
              "base": ("tab:gray", "x"), "floor": ("black", "v")}
    for svc, (color, marker) in styles.items():
        pts = sorted((c, m) for (a, s, c), m in med.items() if a == "rls" and s == svc)
        if len(pts) < 2:
            continue
        cs = [c for c, _ in pts]
        ax1.plot(cs, [m["rps"] for _, m in pts], color=color, marker=marker, label=NAMES[svc])
        ax2.plot(cs, [m["p99_us"] / 1000 for _, m in pts], color=color, marker=marker, label=NAMES[svc])
    concs = sorted({c for (a, _, c) in med if a == "rls"})
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(concs, [str(c) for c in concs])
        ax.minorticks_off()
        ax.set_xlabel("concurrent calls (one gRPC connection)")
        ax.grid(True, which="both", alpha=0.3)
    ax1.set_ylabel("decisions per second")
    ax1.set_ylim(bottom=0)
    ax1.set_title("Throughput (higher is better)")
    ax2.set_yscale("log")
    ax2.set_ylabel("p99 latency (ms, log scale)")
    ax2.set_title("p99 latency (lower is better)")
    ax2.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax1.legend(loc="upper left", fontsize=8)
    if hot:
        labels = [f"{s} c={c}" for c, s, _ in hot]
        colors = {"peer": "tab:red", "xa": "tab:blue", "xagcra": "tab:cyan", "xaallot": "tab:purple",
                  "xaallotgcra": "tab:pink"}
        ax3.bar(range(len(hot)), [m["rps"] for _, _, m in hot], color=[colors.get(s, "tab:gray") for _, s, _ in hot])
        ax3.set_xticks(range(len(hot)), labels, fontsize=7, rotation=40, ha="right")
        ax3.set_ylabel("decisions per second")
        ax3.set_title("Hot keys (a few keys; higher is better)")
        ax3.grid(True, axis="y", alpha=0.3)
    load = statistics.median(m["load1"] for m in med.values())
    fig.suptitle("ShouldRateLimit, one descriptor, 10,000 keys, limit never reached; "
                 f"medians of alternating runs, 2 cores, median load average {load:.1f}")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    rows, png = sys.argv[1], sys.argv[2]
    med = load(rows)
    services = [s for s in NAMES if any(k[1] == s for k in med)]
    figures(med, "rls", services)
    ratios(med, "xa", "peer")
    ratios(med, "xagcra", "peer")
    ratios(med, "base", "peer")
    ratios(med, "xa", "base")
    ratios(med, "xa", "floor")
    ratios(med, "peer", "floor")
    ratios(med, "xaallot", "xa")
    ratios(med, "xaallotgcra", "xagcra")
    if any(k[0] == "rlshot" for k in med):
        figures(med, "rlshot", [s for s in NAMES if ("rlshot", s) in {(k[0], k[1]) for k in med}])
        for svc in ("xa", "xagcra", "xaallot", "xaallotgcra"):
            ratios(med, svc, "peer", api="rlshot")
    per_round(rows, "xa", "peer")
    per_round(rows, "xagcra", "peer")
    per_round(rows, "xa", "base")
    per_round(rows, "xa", "floor")
    per_round(rows, "xaallot", "xa")
    per_round(rows, "xaallotgcra", "xagcra")
    for svc in ("xaallot", "xaallotgcra", "xamem"):
        per_round(rows, svc, "peer", api="rlshot")
    per_round(rows, "xa", "base", api="authz")
    if any(k[0] == "authz" for k in med):
        figures(med, "authz", [s for s in ("xa", "base") if ("authz", s) in {(k[0], k[1]) for k in med}])
    chart(med, png)


if __name__ == "__main__":
    main()
