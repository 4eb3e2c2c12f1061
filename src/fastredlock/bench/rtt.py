"""The round-trip scenario: every lock master behind a delay proxy (``rttproxy.c``) that holds each
chunk 0.25 ms each way, beside the same rows on plain loopback (issue 30, "one round trip per lock
cycle").

    python -m fastredlock.bench.rtt [-d DELAY_US] host:port [host:port ...]
    python -m fastredlock.bench.rtt --check [-d DELAY_US] [--duration S]

builds the proxy if needed and runs it in the foreground: it prints its ports and, every second,
what it forwarded and held (Ctrl-C ends it). ``--check`` starts its own five masters and runs the C
floor (waiting for its release) on loopback, through the proxy with no delay (what its hop costs)
and through the proxy with the delay, N=1 and N=5, and prints how close each comes to its ideal:
where the time goes when the floor through the proxy misses 0.9. The comparison driver runs one proxy for the five lock
masters through the whole run (scenarios ``rtt5`` and ``rtt1``); each job through it gets the
proxy's own numbers for the job's time (:meth:`DelayProxy.stats`): hold times per chunk and the
proxy's CPU, so a report shows that the proxy kept up: the C floor through it should reach at least
0.9 of the ideal ``1 / (2 x round trip)`` (two round trips per lock+unlock cycle, the round trip
being twice the delay).

:func:`rtt_section` is the report's part: per N, every row's cycles/s on loopback and through the
proxy, and the ratios issue 30 sets targets for.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from . import floor as _floor

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "rttproxy.c")
#: the delay the scenario adds each way, in microseconds
DELAY_US = 250

#: (N, ratio, target) the issue's speed targets, read off one run's medians
TARGETS: List[Tuple[str, str, Dict[int, float]]] = [
    ("rtt", "not waiting ÷ C floor (waiting)", {1: 1.7, 5: 1.6}),
    ("rtt", "not waiting ÷ fastredlock waiting", {1: 1.7, 5: 1.6}),
    ("seq", "not waiting ÷ C floor (waiting)", {1: 1.1, 5: 1.0}),
]
#: the proxy must not be what is measured: the C floor through it reaches this share of the ideal
FLOOR_SHARE = 0.9

WAITING, NOWAIT = "fastredlock-cython", "fastredlock-cython-nowait"
FLOOR, FLOOR_NOWAIT = "ref-c-floor", "ref-c-floor-nowait"


def build_proxy() -> str:
    """Path of the compiled proxy (``cc -O2``, cached like the C floor)."""
    return _floor.build_c(SOURCE, "rttproxy")


class DelayProxy:
    """One ``rttproxy`` process in front of ``targets`` (loopback ``redis://host:port`` URLs or
    ``host:port``): :attr:`urls` are the proxied addresses, in the same order."""

    def __init__(self, targets: Sequence[str], delay_us: int = DELAY_US, timerfd: bool = False) -> None:
        binary = build_proxy()
        specs = _floor.master_list(targets).split(",")  # loopback only, checked here and in C
        self.delay_us = delay_us
        flags = ["-T"] if timerfd else []  # the timerfd that kernels before 5.11 get
        self.proc = subprocess.Popen([binary, "-d", str(int(delay_us)), *flags, *specs], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = self._line(10.0)
        if first is None:
            err = self._stop()
            raise RuntimeError(f"rttproxy did not start: {err}")
        hello = json.loads(first)
        self.binary = binary
        self.pid: int = hello["pid"]
        self.wait_call: str = hello["wait"]
        self.ports: List[int] = hello["ports"]
        self.urls = [f"redis://127.0.0.1:{p}" for p in self.ports]

    def _line(self, timeout: float) -> Optional[str]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return line if line.startswith("{") else None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stats(self) -> Dict[str, Any]:
        """What the proxy did since the previous call: chunks, bytes, hold p50 / p99 / max µs, its
        own user and system CPU seconds, wake-ups, connections accepted."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write("stats\n")
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"rttproxy is gone: {exc}") from None
        line = self._line(10.0)
        if line is None:
            raise RuntimeError("rttproxy did not answer 'stats'")
        out: Dict[str, Any] = json.loads(line)
        return out

    def _stop(self) -> str:
        """End the proxy (closing its input ends it; then SIGKILL to our own child); its stderr."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(5.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        err = self.proc.stderr.read() if self.proc.stderr is not None else ""
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()
        return err.strip()[-400:]

    def close(self) -> None:
        if self.proc.returncode is None:
            self._stop()

    def __enter__(self) -> "DelayProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ideal_rate(delay_us: float, round_trips: int = 2) -> float:
    """Cycles/s of a client whose cycle is ``round_trips`` round trips of ``2 x delay`` and nothing
    else (loopback and CPU time counted as zero)."""
    return 1e6 / (round_trips * 2 * delay_us)


def job_proxy_numbers(stats: Dict[str, Any], result: Dict[str, Any], warmup: int, wall: float) -> Dict[str, Any]:
    """The proxy's numbers for one job: its stats window, and its CPU per cycle (the window's CPU
    over the job's measured and warm-up cycles) and while measuring (that x the cycle rate)."""
    cycles = (result.get("cycles") or 0) + warmup
    cpu = stats["user_s"] + stats["sys_s"]
    out = dict(stats)
    out["cpu_s"] = cpu
    out["window_s"] = wall
    out["cpu_ms_per_1000"] = cpu * 1e6 / cycles if cycles else None
    out["cpu_util"] = cpu / cycles * result["rate"] if cycles and result.get("rate") else None
    return out


# --------------------------------------------------------------------------------------------
# the report's section


def round_trips(cid: str) -> int:
    """Round trips per lock+unlock cycle of a row: one when the release is not waited for."""
    return 1 if cid in (NOWAIT, FLOOR_NOWAIT) else 2


def _verdict(value: Optional[float], target: float) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}x " + ("(met)" if value >= target else "(**missed**)")


def rtt_section(report: Any, configs: Iterable[Any], fnum: Callable[..., str],
                med: Callable[[Iterable[Optional[float]]], Optional[float]], delay_us: float) -> List[str]:
    """Tables of the round-trip scenario: per N, loopback beside the proxy; the ratios; the proxy."""
    configs = list(configs)
    if not any(report.ok(c.id, s) for c in configs for s in ("rtt1", "rtt5")):
        return []

    def rate(cid: str, scen: str) -> Optional[float]:
        return med(s["result"]["rate"] for s in report.ok(cid, scen))

    rtt_ms = 2 * delay_us / 1000
    ideal = ideal_rate(delay_us)
    out = [f"### Round trips: every master behind a delay proxy ({delay_us / 1000:g} ms each way, "
           f"round trip {rtt_ms:g} ms), beside loopback", "",
           "Sequential back-to-back lock+unlock cycles, one thread; median of rounds. The proxy "
           "(`rttproxy.c`, one process for all masters, epoll) holds every chunk "
           f"{delay_us:g} µs after reading it, each way. Ideal with two round trips per cycle: "
           f"1 / (2 x {rtt_ms:g} ms) = {fnum(ideal)} cycles/s; with one (release not waited for): "
           f"{fnum(2 * ideal)}. x of ideal: this row's cycles/s ÷ the ideal of its round trips. "
           "Not waiting: `lock.release(wait=False)` (its replies are read by the next round); the C "
           "floor's `-W` does the same with nothing else.", ""]
    peers = [c for c in configs if not c.fast and not c.reference]
    for n in (1, 5):
        rtt, seq = f"rtt{n}", f"seq{n}"
        floor_rtt, floor_seq = rate(FLOOR, rtt), rate(FLOOR, seq)
        rows = []
        best_peer: Optional[Tuple[float, Any]] = None
        for c in peers:
            r = rate(c.id, rtt)
            if r is not None and (best_peer is None or r > best_peer[0]):
                best_peer = (r, c)
        for c in configs:
            if rtt not in c.scenarios or (c in peers and (best_peer is None or c is not best_peer[1])):
                continue
            ok = report.ok(c.id, rtt)
            if not ok:
                continue
            res = [s["result"] for s in ok]
            prox = [s.get("proxy") or {} for s in ok]
            r_rtt = statistics.median(x["rate"] for x in res)
            r_seq = rate(c.id, seq)
            user = med(x["user_ms_per_1000"] for x in res)
            sys_ = med(x["sys_ms_per_1000"] for x in res)
            label = f"**{c.label}**" if c.fast else c.label
            if c in peers:
                label += " (best peer through the proxy)"
            rows.append((r_rtt, [
                label, fnum(r_seq), f"{r_seq / floor_seq:.2f}x" if r_seq and floor_seq else "–",
                fnum(r_rtt), f"{min(x['rate'] for x in res):,.0f}..{max(x['rate'] for x in res):,.0f}",
                f"{r_rtt / floor_rtt:.2f}x" if floor_rtt else "–",
                f"{r_rtt / ideal_rate(delay_us, round_trips(c.id)):.2f} ({round_trips(c.id)})",
                f"{fnum(med(x['acq_p50_us'] for x in res))} / {fnum(med(x['rel_p50_us'] for x in res))}",
                f"{fnum((user or 0) + (sys_ or 0))}",
                f"{fnum(med(p.get('cpu_ms_per_1000') for p in prox))} "
                f"({fnum(med(p.get('cpu_util') for p in prox), 2)})",
                f"{fnum(med(p.get('hold_p50_us') for p in prox))} / {fnum(med(p.get('hold_p99_us') for p in prox))}",
                str(sum(x["fails"] for x in res) + sum(sum(x["errors"].values()) for x in res)),
                str(len(ok)),
            ]))
        if not rows:
            continue
        rows.sort(key=lambda t: -t[0])
        out += [f"#### N={n}", "",
                "| client | loopback cycles/s | loopback x of C floor | through proxy cycles/s | rounds (min..max) "
                "| x of C floor | x of ideal (round trips) | acquire / release p50 µs | client CPU ms / 1000 cycles "
                "| proxy CPU ms / 1000 cycles (util) | proxy hold p50 / p99 µs | fails | samples |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        out += ["| " + " | ".join(cells) + " |" for _, cells in rows]
        out.append("")
    out += ratio_table(rate, ideal)
    missing = report.b.skipped.get(NOWAIT)
    if missing:
        out.append(f"No not-waiting row: {missing}")
        out.append("")
    return out


def ratio_table(rate: Callable[[str, str], Optional[float]], ideal: float) -> List[str]:
    """The ratios issue 30 states targets for (same run, medians, C build), and the proxy's check."""
    def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
        return a / b if a and b else None

    lines = ["Targets (issue 30; same run, medians, Cython core):", "",
             "| ratio | N=1 | target N=1 | N=5 | target N=5 |", "|---|---:|---:|---:|---:|"]
    for where, what, target in TARGETS:
        cells = []
        for n in (1, 5):
            scen = f"{where}{n}"
            other = WAITING if "fastredlock waiting" in what else FLOOR
            cells += [_verdict(ratio(rate(NOWAIT, scen), rate(other, scen)), target[n]), f"≥ {target[n]:.1f}"]
        place = "through the proxy" if where == "rtt" else "loopback"
        lines.append(f"| {place}: {what} | " + " | ".join(cells) + " |")
    cells = []
    for n in (1, 5):
        cells += [_verdict(ratio(rate(FLOOR, f"rtt{n}"), ideal), FLOOR_SHARE), f"≥ {FLOOR_SHARE:.1f}"]
    lines.append("| the proxy keeps up: C floor through it ÷ ideal 1 / (2 x round trip) | " + " | ".join(cells) + " |")
    info = []
    for n in (1, 5):
        loop = rate(FLOOR, f"seq{n}")
        v = ratio(rate(FLOOR, f"rtt{n}"), 1 / (1 / ideal + 1 / loop) if loop else None)
        info += [f"{v:.2f}" if v else "–", "–"]
    lines.append("| (for reference) C floor through it ÷ 1 / (2 x round trip + its loopback cycle) | "
                 + " | ".join(info) + " |")
    info = []
    for n in (1, 5):
        v = ratio(rate(FLOOR_NOWAIT, f"rtt{n}"), 2 * ideal)
        w = ratio(rate(FLOOR_NOWAIT, f"rtt{n}"), rate(FLOOR, f"rtt{n}"))
        info += [f"{v:.2f} / {w:.2f}x" if v and w else "–", "–"]
    lines.append("| (for reference) C floor -W through the proxy ÷ ideal 1 / round trip / ÷ C floor | "
                 + " | ".join(info) + " |")
    return lines + [""]


def proxy_line(samples: List[Dict[str, Any]], fnum: Callable[..., str]) -> List[str]:
    """One line on the proxy over every job that went through it."""
    p = [s["proxy"] for s in samples if s.get("ok") and s.get("proxy")]
    if not p:
        return []
    cpu = sum(x["cpu_s"] for x in p)
    wall = sum(x["window_s"] for x in p)
    return [f"The proxy over all {len(p)} jobs through it: {fnum(sum(x['chunks'] for x in p))} chunks held "
            f"(hold p50 {fnum(statistics.median(x['hold_p50_us'] for x in p))} µs, p99 up to "
            f"{fnum(max(x['hold_p99_us'] for x in p))} µs, max {fnum(max(x['hold_max_us'] for x in p))} µs); "
            f"its own CPU {cpu:.2f} s in {wall:.1f} s of those jobs ({cpu / wall:.2f} of a core, worker "
            "start-up included).", ""]


# --------------------------------------------------------------------------------------------
# the command line: a proxy in the foreground


def check(delay_us: int, duration: float) -> None:
    """The C floor on loopback, through the proxy without delay and with it: one line each."""
    from fastredlock.testing import start_masters

    print(f"C floor, waiting for its release, {duration:g} s each; ideal through the proxy "
          f"{ideal_rate(delay_us):,.0f} cycles/s")
    with start_masters(5) as masters:
        time.sleep(0.5)
        loop: Dict[int, float] = {}
        for delay in (None, 0, delay_us):
            proxy = DelayProxy(masters.urls, delay) if delay is not None else None
            try:
                for n in (1, 5):
                    urls = (proxy.urls if proxy else masters.urls)[:n]
                    if proxy:
                        proxy.stats()
                    r = _floor.run_floor(urls, 10 ** 9, duration=duration, warmup=50)
                    line = (f"N={n} {'loopback' if proxy is None else f'proxy {delay} µs':>14}: "
                            f"{r['cycles_per_s']:9,.0f} cycles/s, cycle p50 {r['cycle_p50_us']:7,.0f} µs")
                    if proxy is None:
                        loop[n] = r["cycle_p50_us"]
                    else:
                        st = proxy.stats()
                        cpu = (st["user_s"] + st["sys_s"]) / max(1, r["cycles"] + 50) * 1e6
                        line += (f"; hold p50 {st['hold_p50_us']} µs (lead {st['lead_us']:.0f}), proxy CPU "
                                 f"{cpu:,.0f} µs/cycle")
                        if delay:
                            ideal = ideal_rate(delay)
                            line += (f"; ÷ ideal {r['cycles_per_s'] / ideal:.2f}, p50 cycle ÷ (4 x delay + "
                                     f"loopback p50 cycle) {(4 * delay + loop[n]) / r['cycle_p50_us']:.2f}")
                    print(line, flush=True)
            finally:
                if proxy:
                    proxy.close()


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fastredlock.bench.rtt",
                                description="Run the delay proxy in front of loopback masters.")
    p.add_argument("-d", "--delay-us", type=int, default=DELAY_US, help="hold per chunk, each way (default 250)")
    p.add_argument("-i", "--interval", type=float, default=1.0, help="seconds between stats lines")
    p.add_argument("--check", action="store_true", help="the C floor on loopback and through the proxy "
                   "(no delay, then the delay), on masters of its own")
    p.add_argument("--duration", type=float, default=2.0, help="--check: seconds per measurement")
    p.add_argument("targets", nargs="*", help="host:port or redis://host:port (loopback only)")
    a = p.parse_args(argv)
    if a.check:
        check(a.delay_us, a.duration)
        return 0
    if not a.targets:
        p.error("targets, or --check")
    try:
        proxy = DelayProxy(a.targets, a.delay_us)
    except (_floor.FloorUnavailable, RuntimeError, ValueError) as exc:
        print(f"fastredlock.bench.rtt: {exc}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with proxy:
        for target, url in zip(a.targets, proxy.urls):
            print(f"{url} -> {target}")
        try:
            while proxy.alive():
                time.sleep(a.interval)
                print(json.dumps(proxy.stats()), flush=True)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
