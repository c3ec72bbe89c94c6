#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""tests/bench/bench-report.py CONSOLE_LOG OUT_DIR -- the `make bench` report.

Reads the BENCHJSON lines the in-VM case `bench` printed (one JSON object
per measurement, see tests/simctl/src/bench.rs), and writes
  OUT_DIR/bench.json   every measurement, as a list
  OUT_DIR/bench.svg    registration time / ideal vs size, and scaling with
                       the number of concurrent registrants
and prints the tables (Markdown) on stdout.  Standard library only; the
chart is SVG written by hand.
"""
import json
import math
import sys


def load(path):
    rows = []
    with open(path, errors="replace") as f:
        for line in f:
            i = line.find("BENCHJSON ")
            if i < 0:
                continue
            try:
                rows.append(json.loads(line[i + len("BENCHJSON "):]))
            except json.JSONDecodeError as e:
                print(f"bench-report: skipping a bad line ({e}): {line[:120]}", file=sys.stderr)
    return rows


def size_name(b):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


def ms(ns):
    if ns is None:
        return "-"
    v = ns / 1e6
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def p(row, key, q="p50"):
    d = row.get(key)
    return d.get(q) if isinstance(d, dict) else None


def size_table(rows):
    out = ["| client | mode | size | regs/s | reg p50 ms | reg p99 ms | ideal ms | ratio p50 | "
           "acquire p50 ms | get_pages p50 ms | dereg p50 ms | dereg p99 ms | pin calls/reg | "
           "SG entries | kernel KiB/reg (driver+core+client) | inval p50 ms | inval p99 ms | "
           "client's own p50 ms | client's share p50 % |",
           "|" + "---|" * 19]
    for r in rows:
        if r.get("kind") != "size":
            continue
        mem = r.get("mem_per_reg_bytes")
        share = p(r, "client_share_ppm")
        out.append("| {} | {} | {} | {:.1f} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2f} | {} | {} | {} | {} | {} | {} |".format(
            r["client"], r["mode"], size_name(r["size"]), r["regs_per_s"],
            ms(p(r, "reg_ns")), ms(p(r, "reg_ns", "p99")), ms(r.get("ideal_reg_ns")),
            f"{r['ratio_p50']:.2f}" if "ratio_p50" in r else "-",
            ms(p(r, "acquire_ns")), ms(p(r, "get_pages_ns")),
            ms(p(r, "dereg_ns")), ms(p(r, "dereg_ns", "p99")), r["pin_calls_per_reg"], r["sg_entries"],
            f"{mem / 1024:.1f}" if mem is not None else "-",
            ms(p(r, "inval_ns")), ms(p(r, "inval_ns", "p99")),
            ms(p(r, "client_own_ns")), f"{share / 1e4:.2f}" if share is not None else "-"))
    return "\n".join(out)


REFERENCE = "nvidia-peermem (NVIDIA)"


def versus_table(rows):
    """Each client against NVIDIA's nvidia-peermem in the same run, mode and size:
    ratios (NVIDIA's figure / the client's: above 1, the client is faster or
    smaller)."""
    ref = {(r["mode"], r["size"]): r for r in rows if r.get("kind") == "size" and r["client"] == REFERENCE}
    out = ["| client | mode | size | reg p50: NVIDIA / client | reg p99: NVIDIA / client | "
           "regs/s: client / NVIDIA | pin calls/reg (client, NVIDIA) | SG entries (client, NVIDIA) | "
           "kernel KiB/reg (client, NVIDIA) | inval p50: NVIDIA / client |", "|" + "---|" * 10]

    def ratio(a, b):
        return f"{a / b:.2f}" if a and b else "-"
    for r in rows:
        n = ref.get((r.get("mode"), r.get("size")))
        if r.get("kind") != "size" or n is None or r["client"] == REFERENCE:
            continue
        kib = lambda x: f"{x['mem_per_reg_bytes'] / 1024:.0f}" if x.get("mem_per_reg_bytes") is not None else "-"
        out.append("| {} | {} | {} | {} | {} | {} | {:.2f}, {:.2f} | {}, {} | {}, {} | {} |".format(
            r["client"], r["mode"], size_name(r["size"]),
            ratio(p(n, "reg_ns"), p(r, "reg_ns")), ratio(p(n, "reg_ns", "p99"), p(r, "reg_ns", "p99")),
            ratio(r["regs_per_s"], n["regs_per_s"]), r["pin_calls_per_reg"], n["pin_calls_per_reg"],
            r["sg_entries"], n["sg_entries"], kib(r), kib(n), ratio(p(n, "inval_ns"), p(r, "inval_ns"))))
    return "\n".join(out) if len(out) > 2 else ""


def mixed_table(rows):
    out = ["| client | mode | size | registrations beside | reg p50 ms alone | reg p50 ms beside | "
           "reg p99 ms alone | reg p99 ms beside | p50 beside / alone | other's dereg p50 ms |", "|" + "---|" * 10]
    for r in rows:
        if r.get("kind") != "mixed":
            continue
        a, b = p(r, "alone_reg_ns"), p(r, "beside_reg_ns")
        out.append("| {} | {} | {} | {} x {} dereg ({} overlapped) | {} | {} | {} | {} | {} | {} |".format(
            r["client"], r["mode"], size_name(r["size"]), r["beside_regs"], size_name(r["beside"]), r["overlapped"],
            ms(a), ms(b), ms(p(r, "alone_reg_ns", "p99")), ms(p(r, "beside_reg_ns", "p99")),
            f"{b / a:.2f}" if a and b else "-", ms(p(r, "peer_dereg_ns"))))
    return "\n".join(out) if len(out) > 2 else ""


def gda_table(rows):
    out = ["| client | mode | registrations held (processes) | reg p50 ms by live count | "
           "reg p99 ms by live count | p99 last / first | exit holding N MRs: total ms | per MR ms |", "|" + "---|" * 8]
    for r in rows:
        if r.get("kind") != "gda":
            continue
        b = r["by_live"]
        p50 = " / ".join(ms(p(x, "reg_ns")) for x in b)
        p99 = " / ".join(ms(p(x, "reg_ns", "p99")) for x in b)
        first, last = p(b[0], "reg_ns", "p99"), p(b[-1], "reg_ns", "p99")
        out.append("| {} | {} | {} ({}) | {} | {} | {} | {} MRs: {} | {} |".format(
            r["client"], r["mode"], r["regs"], r["procs"], p50, p99,
            f"{last / first:.2f}" if first and last else "-",
            r["exit_regs"], ms(r["exit_ns"]),
            ms(r["exit_ns"] / r["exit_regs"]) if r["exit_regs"] else "-"))
    return "\n".join(out) if len(out) > 2 else ""


def scale_table(rows):
    out = ["| client | mode | size | registrants | regs/s | reg p50 ms | reg p99 ms | "
           "acquire wait p99 ms | acquire p50 ms |", "|" + "---|" * 9]
    for r in rows:
        if r.get("kind") not in ("threads", "procs"):
            continue
        n = r["threads"] if r["kind"] == "threads" else r["procs"]
        out.append("| {} | {} | {} | {} {} | {:.1f} | {} | {} | {} | {} |".format(
            r["client"], r["mode"], size_name(r["size"]), n, r["kind"], r["regs_per_s"],
            ms(p(r, "reg_ns")), ms(p(r, "reg_ns", "p99")),
            ms(p(r, "acquire_wait_ns", "p99")), ms(p(r, "acquire_ns"))))
    return "\n".join(out)


COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Panel:
    """One log-log (or log-x) plot area of the SVG."""

    def __init__(self, x0, y0, w, h, xs, ys, logy=True):
        self.x0, self.y0, self.w, self.h = x0, y0, w, h
        self.lx = (math.log10(min(xs)), math.log10(max(xs)) + 1e-9)
        self.logy = logy
        lo, hi = min(ys), max(ys)
        if logy:
            self.ly = (math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + (0 if hi > lo else 1))
        else:
            self.ly = (0.0, hi * 1.1 if hi > 0 else 1.0)

    def x(self, v):
        a, b = self.lx
        return self.x0 + (math.log10(v) - a) / (b - a) * self.w if b > a else self.x0 + self.w / 2

    def y(self, v):
        a, b = self.ly
        t = (math.log10(max(v, 1e-12)) if self.logy else v) - a
        return self.y0 + self.h - t / (b - a) * self.h


def chart(rows):
    sizes = [r for r in rows if r.get("kind") == "size" and p(r, "reg_ns") and r.get("ideal_reg_ns")]
    scale = [r for r in rows if r.get("kind") in ("threads", "procs")]
    # Scaling: the largest size measured, in one mode (invalidate if there).
    scale_size = max((r["size"] for r in scale), default=0)
    modes = sorted({r["mode"] for r in scale}, key=lambda m: m != "invalidate")
    scale_mode = modes[0] if modes else ""
    scale = [r for r in scale if r["size"] == scale_size and r["mode"] == scale_mode]
    W, H = 1000, 450
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>']
    series = {}
    for r in sizes:
        series.setdefault((r["client"], r["mode"]), []).append(r)
    if sizes:
        # Time / ideal on a linear axis, so that a 2x shows as twice the height.
        xs = [r["size"] for r in sizes]
        ys = [p(r, "reg_ns") / r["ideal_reg_ns"] for r in sizes]
        P = Panel(70, 40, 360, 320, xs, [0.0, 2.0] + ys, logy=False)
        svg.append(f'<text x="{P.x0}" y="22" font-size="13">Registration time p50 / ideal (one pin + one map) vs size</text>')
        step = 0.5 if P.ly[1] <= 4 else 1.0 if P.ly[1] <= 8 else 2.0
        v = 0.0
        while v <= P.ly[1]:
            yy = P.y(v)
            stroke = "#999" if v in (1.0, 2.0) else "#ddd"
            svg.append(f'<line x1="{P.x0}" y1="{yy:.1f}" x2="{P.x0 + P.w}" y2="{yy:.1f}" stroke="{stroke}"/>')
            svg.append(f'<text x="{P.x0 - 6}" y="{yy + 4:.1f}" text-anchor="end">{v:g}</text>')
            v += step
        for s in sorted(set(xs)):
            xx = P.x(s)
            svg.append(f'<text x="{xx:.1f}" y="{P.y0 + P.h + 16}" text-anchor="middle">{size_name(s)}</text>')
        svg.append(f'<rect x="{P.x0}" y="{P.y0}" width="{P.w}" height="{P.h}" fill="none" stroke="#333"/>')
        for i, (key, rs) in enumerate(sorted(series.items())):
            c = COLORS[i % len(COLORS)]
            rs = sorted(rs, key=lambda r: r["size"])
            pts = " ".join(f"{P.x(r['size']):.1f},{P.y(p(r, 'reg_ns') / r['ideal_reg_ns']):.1f}" for r in rs)
            dash = ' stroke-dasharray="5,3"' if key[1] == "persistent" else ""
            svg.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
            svg.append(f'<text x="{P.x0 + 8}" y="{P.y0 + 14 + 14 * i}" fill="{c}">{esc(key[0])} ({esc(key[1])})</text>')
    if scale:
        xs = [r["threads"] if r["kind"] == "threads" else r["procs"] for r in scale]
        ys = [r["regs_per_s"] for r in scale]
        P = Panel(560, 40, 400, 320, xs, [0.0] + ys, logy=False)
        svg.append(f'<text x="{P.x0}" y="22" font-size="13">Scaling at {size_name(scale_size)} ({esc(scale_mode)}): '
                   'registrations/s vs concurrent registrants</text>')
        svg.append(f'<text x="{P.x0}" y="{P.y0 + P.h + 30}" fill="#555">solid: threads of one process; dashed: processes</text>')
        for k in range(6):
            v = P.ly[1] * k / 5
            yy = P.y(v)
            svg.append(f'<line x1="{P.x0}" y1="{yy:.1f}" x2="{P.x0 + P.w}" y2="{yy:.1f}" stroke="#ddd"/>')
            svg.append(f'<text x="{P.x0 - 6}" y="{yy + 4:.1f}" text-anchor="end">{v:.0f}</text>')
        for n in sorted(set(xs)):
            svg.append(f'<text x="{P.x(n):.1f}" y="{P.y0 + P.h + 16}" text-anchor="middle">{n}</text>')
        svg.append(f'<rect x="{P.x0}" y="{P.y0}" width="{P.w}" height="{P.h}" fill="none" stroke="#333"/>')
        groups = {}
        for r in scale:
            groups.setdefault((r["client"], r["mode"], r["size"], r["kind"]), []).append(r)
        clients = sorted({k[0] for k in groups})
        for i, c_name in enumerate(clients):
            svg.append(f'<text x="{P.x0 + 8}" y="{P.y0 + 14 + 14 * i}" fill="{COLORS[i % len(COLORS)]}">{esc(c_name)}</text>')
        for key, rs in sorted(groups.items()):
            c = COLORS[clients.index(key[0]) % len(COLORS)]
            rs = sorted(rs, key=lambda r: r["threads"] if r["kind"] == "threads" else r["procs"])
            pts = " ".join(f"{P.x(r['threads'] if r['kind'] == 'threads' else r['procs']):.1f},{P.y(r['regs_per_s']):.1f}" for r in rs)
            dash = ' stroke-dasharray="5,3"' if key[3] == "procs" else ""
            svg.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
    svg.append(f'<text x="10" y="{H - 8}" fill="#555">peermem-rs make bench: simulated GPU driver and RDMA core '
               '(latency model on), QEMU TCG; not a measurement of real hardware.</text>')
    svg.append("</svg>")
    return "\n".join(svg)


def main():
    if len(sys.argv) != 3:
        print("usage: bench-report.py CONSOLE_LOG OUT_DIR", file=sys.stderr)
        return 2
    rows = load(sys.argv[1])
    with open(f"{sys.argv[2]}/bench.json", "w") as f:
        # A list, one measurement per line.
        f.write("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")
    with open(f"{sys.argv[2]}/bench.svg", "w") as f:
        f.write(chart(rows) + "\n")
    print("Registration cost by size (times measured by the simulated core, ms):\n")
    print(size_table(rows))
    vs = versus_table(rows)
    if vs:
        print(f"\nAgainst NVIDIA's nvidia-peermem, same run, mode and size (ratios):\n")
        print(vs)
    mx = mixed_table(rows)
    if mx:
        print("\nMixed load (registrations alone, then while another process deregisters):\n")
        print(mx)
    gd = gda_table(rows)
    if gd:
        print("\nGPU-initiated networking's shape (small registrations held by several processes, "
              "filed by how many were live; then one process exits holding many):\n")
        print(gd)
    print("\nScaling (concurrent registrants: threads of one process, or processes):\n")
    print(scale_table(rows))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
