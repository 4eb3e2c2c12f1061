"""The report of a comparison run: the markdown tables (medians over rounds, ratios to the C floor
and to the best peer), the JSON of every sample, and the charts.

The charts can also be drawn again from a run's JSON, without running anything::

    python -m fastredlock.bench.report compare.json OUT_DIR   # OUT_DIR/seq5.png, OUT_DIR/seq1.png

(docs/assets/performance/ holds the charts the documentation shows, drawn that way.)"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .configs import BY_ID, CONFIGS, FLOOR_ID
from .rtt import proxy_line, rtt_section
from .run import Bench
from .turns import turns_table

def med(xs: Iterable[Optional[float]]) -> Optional[float]:
    v = [x for x in xs if x is not None]
    return statistics.median(v) if v else None


def per_1000(x: Optional[float]) -> Optional[float]:
    """``x / 1000`` (microseconds to milliseconds), None kept (no sample)."""
    return None if x is None else x / 1000


def fnum(x: Optional[float], digits: int = 0) -> str:
    if x is None:
        return "–"
    return f"{x:,.{digits}f}"


def frange(xs: List[float], digits: int = 0) -> str:
    if not xs:
        return "–"
    return f"{min(xs):,.{digits}f}..{max(xs):,.{digits}f}"


class Report:
    def __init__(self, bench: Bench, argv: List[str]) -> None:
        self.b = bench
        self.argv = argv
        self.by: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
        for s in bench.samples:
            self.by.setdefault((s["config"], s["scenario"]), []).append(s)

    def ok(self, cid: str, scen: str) -> List[Dict[str, Any]]:
        return [s for s in self.by.get((cid, scen), []) if s.get("ok")]

    def failed(self, cid: str, scen: str) -> List[Dict[str, Any]]:
        return [s for s in self.by.get((cid, scen), []) if not s.get("ok")]

    def floor_rate(self, scen: str) -> Optional[float]:
        """The C floor's rate in this scenario (median of rounds), None if it did not run."""
        rates = [s["result"]["rate"] for s in self.ok(FLOOR_ID, scen)]
        return statistics.median(rates) if rates else None

    def fast_rate(self, scen: str) -> Tuple[Optional[float], str]:
        for cid in ("fastredlock-cython", "fastredlock-python"):
            rates = [s["result"]["rate"] for s in self.ok(cid, scen)]
            if rates:
                return statistics.median(rates), BY_ID[cid].label
        return None, ""

    # --- sections ---------------------------------------------------------------------------
    def header(self) -> List[str]:
        b = self.b
        s = b.s
        cpu = ""
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        cpu = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        floor_version = ""
        if b.floor_binary:
            try:
                floor_version = subprocess.run([b.floor_binary, "--version"], capture_output=True,
                                               text=True, timeout=10).stdout.strip()
            except (OSError, subprocess.TimeoutExpired):
                pass
        lines = [
            "# fastredlock vs other Python Redlock clients",
            "",
            f"Command: `{' '.join(self.argv)}`  ",
            f"Date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; took {b.elapsed / 60:.1f} min; "
            f"{s.rounds} round(s), jobs shuffled within each round (seed {b.args.seed}), every job in a fresh process.  ",
            f"Machine: {platform.system()} {platform.release()}, {os.cpu_count()} CPUs ({cpu}); "
            f"Python {platform.python_version()} ({platform.python_implementation()}).  ",
            f"Masters: {b.server['version']} ({b.server['binary']}) on 127.0.0.1, `--save '' --appendonly no`: "
            "5 lock masters, 1 counter master, 1 that fault jobs break in place of the first lock master. "
            f"Floor: {floor_version or 'redis-benchmark not found'}; C floor: "
            f"{(b.info.get(FLOOR_ID) or {}).get('module_file') or 'not built'}.  ",
            f"Settings: TTL {s.ttl:g} s; {s.duration:g} s per sequential/threads sample after {s.warmup} warm-up "
            f"cycles; contention {s.procs} processes x {s.contend_duration:g} s; faults {s.attempts} attempt(s) "
            f"per sample, an answer later than {s.hang_limit:g} s counts as hung.",
            "",
            "| configuration | packages (as imported by its worker) | isolation |",
            "|---|---|---|",
        ]
        for c in CONFIGS:
            if c.id in b.info:
                vers = ", ".join(f"{k} {v}" for k, v in b.info[c.id].get("versions", {}).items() if v)
                iso = f"`python -S`, PYTHONPATH={b.peer_dirs.get(c.group or '')}" if c.isolated else "this environment"
                lines.append(f"| {c.label} | {vers} | {iso} |")
        lines.append("")
        lines.append("Compare ratios within one run; absolute numbers move ±30% between runs on a noisy machine.")
        lines.append("")
        return lines

    def seq_table(self, scen: str, title: str) -> List[str]:
        fast, fast_label = self.fast_rate(scen)
        floor = self.floor_rate(scen)
        rows = []
        for c in CONFIGS:
            if scen not in c.scenarios:
                continue
            ok = self.ok(c.id, scen)
            if not ok:
                continue
            r = [s["result"] for s in ok]
            rate = statistics.median(x["rate"] for x in r)
            user = med(x["user_ms_per_1000"] for x in r)
            sys_ = med(x["sys_ms_per_1000"] for x in r)
            per_batch = " (per batch)" if scen == "batch" else ""
            ratio = f"{fast / rate:.2f}x" if fast else "–"
            rows.append((rate, [
                f"**{c.label}**" if c.fast else c.label, c.style, fnum(rate), frange([x["rate"] for x in r]),
                f"{fnum(med(x['acq_p50_us'] for x in r))} / {fnum(med(x['acq_p99_us'] for x in r))}{per_batch}",
                f"{fnum(med(x['rel_p50_us'] for x in r))} / {fnum(med(x['rel_p99_us'] for x in r))}",
                f"{fnum((user or 0) + (sys_ or 0))} ({fnum(user)}+{fnum(sys_)})",
                fnum(med(x["cpu_util"] for x in r), 2),
                str(sum(x["fails"] for x in r) + sum(sum(x["errors"].values()) for x in r)),
                str(sum(s.get("leftover_keys", 0) for s in ok)),
                ratio, f"{rate / floor:.2f}x" if floor else "–",
                f"{len(ok)}" + (f" (+{len(self.failed(c.id, scen))} failed)" if self.failed(c.id, scen) else ""),
            ]))
        if not rows:
            return []
        rows.sort(key=lambda t: -t[0])
        out = [f"### {title}", "",
               f"| client | style | {'locks' if scen == 'batch' else 'cycles'}/s | rounds (min..max) "
               "| acquire p50 / p99 µs | release p50 / p99 µs "
               f"| CPU ms / 1000 {'locks' if scen == 'batch' else 'cycles'} (user+sys) | client CPU util "
               f"| fails | leftover keys | {fast_label or 'fastredlock'} ÷ this | x of C floor | samples |",
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        out += ["| " + " | ".join(cells) + " |" for _, cells in rows]
        out.append("")
        if floor:
            unit = "locks/s" if scen == "batch" else "cycles/s"
            line = f"Physical limit of this machine: the C floor's {fnum(floor)} {unit}"
            if fast:
                line += f"; {fast_label} runs at {fast / floor:.2f}x of it"
            out.append(line + " (x of C floor: this row's rate ÷ the floor's).")
        else:
            out.append(f"No C floor in this run ({self.b.skipped.get(FLOOR_ID, 'skipped or failed')}).")
        return out + [""]

    def threads_table(self) -> List[str]:
        fast, fast_label = self.fast_rate("threads")
        rows = []
        for c in CONFIGS:
            ok = self.ok(c.id, "threads")
            if not ok:
                continue
            r = [s["result"] for s in ok]
            rate = statistics.median(x["rate"] for x in r)
            user = med(x["user_ms_per_1000"] for x in r)
            sys_ = med(x["sys_ms_per_1000"] for x in r)
            adapter_async = "-async" in c.id or "aio" in c.id  # pottery-aio, aioredlock, redis-py's asyncio Lock
            mode = f"{self.b.s.tasks} asyncio tasks, one loop" if adapter_async else f"{self.b.s.threads} threads"
            ratio = f"{fast / rate:.2f}x" if fast else "–"
            rows.append((rate, [
                f"**{c.label}**" if c.fast else c.label, mode, fnum(rate), frange([x["rate"] for x in r]),
                f"{fnum(med(x['acq_p50_us'] for x in r))} / {fnum(med(x['acq_p99_us'] for x in r))}",
                f"{fnum((user or 0) + (sys_ or 0))} ({fnum(user)}+{fnum(sys_)})",
                fnum(med(x["cpu_util"] for x in r), 2),
                str(sum(x["fails"] for x in r) + sum(sum(x["errors"].values()) for x in r)),
                str(sum(s.get("leftover_keys", 0) for s in ok)), ratio,
            ]))
        if not rows:
            return []
        rows.sort(key=lambda t: -t[0])
        out = [f"### {self.b.s.threads} threads (asyncio clients: {self.b.s.tasks} tasks) sharing one client "
               "(N=5; redis-py Lock N=1)", "",
               "| client | concurrency | cycles/s (all threads) | rounds (min..max) | acquire p50 / p99 µs "
               "| CPU ms / 1000 cycles (user+sys) | client CPU util | fails | leftover keys "
               f"| {fast_label or 'fastredlock'} ÷ this |",
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        out += ["| " + " | ".join(cells) + " |" for _, cells in rows]
        return out + [""]

    def contend_table(self) -> List[str]:
        rows = []
        for c in CONFIGS:
            ok = self.ok(c.id, "contend")
            if not ok:
                continue
            r = [s["result"] for s in ok]
            rate = statistics.median(x["rate"] for x in r)
            errors: Dict[str, int] = {}
            for x in r:
                for k, v in x["errors"].items():
                    errors[k] = errors.get(k, 0) + v
            rows.append((rate, [
                f"**{c.label}**" if c.fast else c.label, fnum(rate, 1), frange([x["rate"] for x in r], 1),
                fnum(med(x["failed_rate"] for x in r), 1),
                fnum(med(x["jain"] for x in r), 3),
                f"{min(x['share_min'] for x in r) * 100:.0f}%..{max(x['share_max'] for x in r) * 100:.0f}%",
                f"{fnum(per_1000(med(x['wait_p50_us'] for x in r)), 1)} / "
                f"{fnum(per_1000(med(x['wait_p99_us'] for x in r)), 1)}",
                f"**{sum(x['doubles'] for x in r)}**" if sum(x["doubles"] for x in r) else "0",
                ", ".join(f"{k} x{v}" for k, v in sorted(errors.items())) or "0",
                str(sum(s.get("leftover_keys", 0) for s in ok)),
            ]))
        if not rows:
            return []
        rows.sort(key=lambda t: -t[0])
        s = self.b.s
        out = [f"### Contention: {s.procs} processes, one name, each library's default retry policy", "",
               "| client | acquisitions/s | rounds (min..max) | failed acquires/s | fairness (Jain, 1 = even) "
               "| share per process (min..max) | acquire wait p50 / p99 ms | double holders | exceptions "
               "| leftover keys |",
               "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
        out += ["| " + " | ".join(cells) + " |" for _, cells in rows]
        return out + [""]

    def fault_cells(self, cid: str, kind: str) -> List[str]:
        ok = self.ok(cid, kind)
        if not ok:
            failed = self.failed(cid, kind)
            return ["–"] * 4 if not failed else [f"failed: {failed[0].get('error', '')[:60]}"] + ["–"] * 3
        rows = [a for s in ok for a in s["result"]["attempts"]]
        n = len(rows)
        got = sum(1 for a in rows if a["acquired"])
        hung = sum(1 for a in rows if a["hung"])
        times = sorted(a["answer_ms"] for a in rows if not a["hung"])
        exc = sum(1 for a in rows if a["acq_exc"] or a["rel_exc"] or a.get("rel_hung"))
        holding = sum(1 for a in rows if a["exc_while_holding"])
        leaked = sum(s.get("leftover_keys", 0) for s in ok)
        abandoned = sum(a.get("holding_after", 0) for a in rows if a["hung"] or a.get("rel_hung"))
        t = f"{fnum(statistics.median(times), 1)} / {fnum(times[-1], 1)}" if times else "–"
        keys = f"**{leaked}**" if leaked else "0"
        if abandoned:
            keys += f" ({abandoned} by hung calls)"
        return [f"{got}/{n}", t + (f", **{hung} hung**" if hung else ""), f"{exc} ({holding})", keys]

    def faults_table(self) -> List[str]:
        lines = []
        for c in CONFIGS:
            if "refuse" not in c.scenarios and "stall" not in c.scenarios:
                continue
            if not (self.by.get((c.id, "refuse")) or self.by.get((c.id, "stall"))):
                continue
            cells = self.fault_cells(c.id, "refuse") + self.fault_cells(c.id, "stall")
            lines.append("| " + " | ".join([f"**{c.label}**" if c.fast else c.label] + cells) + " |")
        if not lines:
            return []
        s = self.b.s
        return ["### One of 5 masters bad: refusing connections (killed) / stalled (SIGSTOP)", "",
                f"{s.attempts} acquire+release attempt(s) per round, each on a fresh name; hung = no answer "
                f"within {s.hang_limit:g} s (then the harness interrupts it). Keys leaked are counted after the "
                "bad master is back (a stalled master then runs the SETs queued while it was stopped: they "
                "land after the client gave up or released, and stay until their TTL); in parentheses, keys "
                "that calls the harness interrupted had left on the healthy masters.", "",
                "| client | refusing: acquired | answer p50 / max ms | exceptions (while holding) | keys leaked "
                "| stalled: acquired | answer p50 / max ms | exceptions (while holding) | keys leaked |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|"] + lines + [""] + self.exceptions_seen()

    def exceptions_seen(self) -> List[str]:
        seen: Dict[Tuple[str, str], Dict[str, int]] = {}
        for s in self.b.samples:
            if s.get("ok") and s["scenario"] in ("refuse", "stall"):
                for a in s["result"]["attempts"]:
                    for e in (a["acq_exc"], a["rel_exc"]):
                        if e:
                            d = seen.setdefault((s["config"], s["scenario"]), {})
                            k = e.split(":", 1)[0]
                            d[k] = d.get(k, 0) + 1
        if not seen:
            return []
        out = ["Exceptions raised under faults:", ""]
        for (cid, scen), d in sorted(seen.items()):
            out.append(f"- {BY_ID[cid].label}, {scen}: " + ", ".join(f"{k} x{v}" for k, v in sorted(d.items())))
        return out + [""]

    def floor_table(self) -> List[str]:
        ok = self.ok("redis-benchmark", "floor")
        if not ok:
            return []
        tests = []
        for s in ok:
            for k in s["result"]:
                t = k.split("|")[0]
                if t not in tests:
                    tests.append(t)
        out = ["### redis-benchmark floor (one master, -c 1)", "",
               f"`redis-benchmark -c 1 -n {self.b.s.floor_requests} -P 1|16 -t ping,set`, median of rounds.", "",
               "| test | -P 1 req/s | -P 1 p50 ms | -P 16 req/s | -P 16 p50 ms |", "|---|---:|---:|---:|---:|"]
        for t in tests:
            cells = [t]
            for p in (1, 16):
                vals = [s["result"].get(f"{t}|P{p}") for s in ok]
                vals = [v for v in vals if v]
                cells += [fnum(med(v["rps"] for v in vals)), fnum(med(v["p50_ms"] for v in vals), 3)]
            out.append("| " + " | ".join(cells) + " |")
        return out + [""]

    def tls_table(self) -> List[str]:
        """The TLS rows, and the two ratios they are held to: fastredlock's cost of TLS against
        redis-benchmark's (the same run), and fastredlock over TLS against the best TLS peer."""
        out = self.seq_table("tls5", "Sequential lock+unlock over TLS, N=5 masters (median of rounds)")
        if not out:
            return []
        out = [line for line in out if not line.startswith("No C floor")]
        rate = {cid: med(s["result"]["rate"] for s in self.ok(cid, scen))
                for cid, scen in (("fastredlock-cython", "seq5"), ("fastredlock-cython-tls", "tls5"))}
        ref = [s["result"] for s in self.ok("redis-benchmark", "tlsref")]
        if ref and all(rate.values()):
            bench_ratio = statistics.median(r["tls"] / r["plain"] for r in ref)
            ours = rate["fastredlock-cython-tls"] / rate["fastredlock-cython"]  # type: ignore[operator]
            out.append(f"Cost of TLS: fastredlock (Cython) with TLS ÷ without = {ours:.2f}; redis-benchmark "
                       f"-c 1 -t set with --tls ÷ without = {bench_ratio:.2f} "
                       f"({fnum(statistics.median(r['tls'] for r in ref))} vs "
                       f"{fnum(statistics.median(r['plain'] for r in ref))} req/s); "
                       f"ours ÷ redis-benchmark's = {ours / bench_ratio:.2f}.")
        rates = [med(s["result"]["rate"] for s in self.ok(c.id, "tls5")) for c in CONFIGS
                 if "tls5" in c.scenarios and not c.fast and not c.reference]
        peers = [p for p in rates if p]
        ours_tls = rate["fastredlock-cython-tls"]
        if peers and ours_tls:
            out.append(f"fastredlock (Cython) over TLS ÷ the best TLS peer: {ours_tls / max(peers):.1f}x.")
        return out + [""]

    def skipped(self) -> List[str]:
        out = []
        for cid, reason in self.b.skipped.items():
            label = BY_ID[cid].label if cid in BY_ID else cid
            out.append(f"- **{label}**: {reason}")
        failed = [s for s in self.b.samples if not s.get("ok")]
        for s in failed:
            out.append(f"- {s['config']} / {s['scenario']} round {s['round']}: failed: {s.get('error')}")
        return (["### Skipped or failed", ""] + out + [""]) if out else []

    def markdown(self) -> str:
        parts = self.header()
        parts += self.seq_table("seq5", "Sequential lock+unlock, N=5 masters (median of rounds)")
        parts += self.seq_table("seq1", "Sequential lock+unlock, N=1 master (median of rounds)")
        parts += self.seq_table("batch", "Batches: 64 locks per call, N=5 (fastredlock: acquire_many / "
                                "release_many; no peer has a batch API)")
        parts += self.threads_table()
        parts += self.contend_table()
        parts += turns_table(self, CONFIGS, fnum, med)
        parts += self.faults_table()
        parts += self.floor_table()
        parts += self.tls_table()
        parts += rtt_section(self, CONFIGS, fnum, med, self.b.s.rtt_delay_us)
        parts += proxy_line([s for s in self.b.samples if s["scenario"] in ("rtt1", "rtt5")], fnum)
        parts += self.skipped()
        return "\n".join(parts) + "\n"

    def json(self) -> Dict[str, Any]:
        b = self.b
        return {
            "command": self.argv,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "elapsed_s": b.elapsed,
            "machine": {"system": platform.platform(), "cpus": os.cpu_count(),
                        "python": platform.python_version()},
            "server": b.server,
            "redis_benchmark": b.floor_binary,
            "settings": b.s.__dict__,
            "seed": b.args.seed,
            "configs": {c.id: {"label": c.label, "style": c.style, "group": c.group,
                               "peer_dir": b.peer_dirs.get(c.group) if c.group else None,
                               "info": b.info.get(c.id)} for c in CONFIGS},
            "install": b.install_notes,
            "skipped": b.skipped,
            "samples": b.samples,
        }

    #: The charts :meth:`charts` draws: scenario, its title.
    CHARTS = (("seq5", "5 local masters"), ("seq1", "1 local master"))

    def charts(self, out_dir: str) -> List[str]:
        """Draw one chart per scenario of :data:`CHARTS` that has samples into ``out_dir``
        (``<scenario>.png``); return the paths written."""
        os.makedirs(out_dir, exist_ok=True)
        written = []
        for scen, _ in self.CHARTS:
            path = os.path.join(out_dir, f"{scen}.png")
            if self.chart(path, scen) is None:
                written.append(path)
        return written

    def chart(self, path: str, scen: str = "seq5") -> Optional[str]:
        """Draw scenario ``scen``'s chart (rate and client CPU per configuration) into ``path``;
        None when written, else why not."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return "matplotlib is not installed (pip install -e '.[bench]')"
        rows = []
        for c in CONFIGS:
            ok = self.ok(c.id, scen)
            if not ok:
                continue
            r = [s["result"] for s in ok]
            rates = [x["rate"] for x in r]
            rows.append((c, statistics.median(rates), min(rates), max(rates),
                         med(x["user_ms_per_1000"] for x in r) or 0, med(x["sys_ms_per_1000"] for x in r) or 0))
        if not rows:
            return f"no {scen} samples to chart"
        rows.sort(key=lambda t: t[1])
        labels = [t[0].label for t in rows]
        colors = ["#d62728" if t[0].fast else ("#7f7f7f" if t[0].reference else "#1f77b4") for t in rows]
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 0.45 * len(rows) + 1.8), sharey=True)
        y = range(len(rows))
        med_r = [t[1] for t in rows]
        err = [[t[1] - t[2] for t in rows], [t[3] - t[1] for t in rows]]
        ax1.barh(list(y), med_r, xerr=err, color=colors, capsize=3)
        ax1.set_yticks(list(y))
        ax1.set_yticklabels(labels)
        ax1.set_xlabel("lock+unlock cycles/s (median; whiskers: min..max of rounds)")
        for i, t in enumerate(rows):
            ax1.text(max(t[1], t[3]), i, f"  {t[1]:,.0f}", va="center", fontsize=8)
        ax1.set_xlim(0, max(t[3] for t in rows) * 1.15)
        users = [t[4] for t in rows]
        syss = [t[5] for t in rows]
        ax2.barh(list(y), users, color=colors, label="user")
        ax2.barh(list(y), syss, left=users, color=colors, alpha=0.45, label="sys", hatch="//")
        ax2.set_xlabel("client CPU ms per 1000 cycles, lower is better\n(solid: user, hatched: sys)")
        for i, (u, s_) in enumerate(zip(users, syss)):
            ax2.text(u + s_, i, f"  {u + s_:,.0f}", va="center", fontsize=8)
        ax2.set_xlim(0, max(u + s_ for u, s_ in zip(users, syss)) * 1.15)
        where = dict(self.CHARTS).get(scen, scen)
        fig.suptitle(f"Sequential lock+unlock on {where} ({self.b.server['version']}), "
                     f"{self.b.s.rounds} round(s); red: fastredlock, grey: references")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return None


# --------------------------------------------------------------------------------------------


def from_json(path: str) -> Report:
    """A :class:`Report` over a run's ``compare.json`` (its samples, server and settings), for the
    tables and charts of a run that is over."""
    with open(path) as f:
        data = json.load(f)
    bench = SimpleNamespace(samples=data["samples"], server=data["server"], s=SimpleNamespace(**data["settings"]),
                            skipped=data.get("skipped", {}))
    return Report(bench, data.get("command", []))  # type: ignore[arg-type]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m fastredlock.bench.report compare.json OUT_DIR")
    for written in from_json(sys.argv[1]).charts(sys.argv[2]):
        print("wrote", written)
