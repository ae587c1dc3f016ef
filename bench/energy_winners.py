#!/usr/bin/env python3
"""The winners of one job measured with energy (ktune show JOB --json on
stdin): the fastest configuration and the most energy-efficient one, with
each one's time, power, energy per launch and FLOP per joule, and how far
apart they are. FLOPS gives the work per launch (2*M*N*K for GEMM).

  ktune show JOB --db energy.db --json | bench/energy_winners.py FLOPS
"""
import json
import sys


def main():
    flops = float(sys.argv[1])
    job = json.load(sys.stdin)
    ok = [m for m in job["measurements"]
          if m["status"] == "ok" and m["conditions"].get("energy_j")]
    if not ok:
        sys.exit("no ok measurement with its energy")
    fastest = min(ok, key=lambda m: m["time_ms"])
    frugal = min(ok, key=lambda m: m["conditions"]["energy_j"])

    def line(what, m):
        c = m["conditions"]
        return (f"{what:<16} {m['key']:<12} {m['time_ms']:8.3f} ms  {c['power_w']:6.1f} W  "
                f"{c['energy_j']:7.4f} J  {flops / c['energy_j'] / 1e9:6.2f} GFLOP/J  "
                f"{flops / m['time_ms'] / 1e9:6.2f} TFLOP/s")

    print(f"{len(ok)} configurations with their energy ({ok[0]['conditions']['energy_method']}, "
          f"windows of {min(m['conditions']['energy_window_ms'] for m in ok):.0f} ms or more)")
    print(line("fastest", fastest))
    print(line("least energy", frugal))
    if fastest["key"] == frugal["key"]:
        print("the same configuration wins both")
    else:
        ft, fe = fastest["time_ms"], fastest["conditions"]["energy_j"]
        et, ee = frugal["time_ms"], frugal["conditions"]["energy_j"]
        print(f"the least-energy winner takes {et / ft:.3f}x the fastest's time and "
              f"{ee / fe:.3f}x its energy ({100 * (1 - ee / fe):.1f} % less), at "
              f"{frugal['conditions']['power_w'] / fastest['conditions']['power_w']:.3f}x its power")


if __name__ == "__main__":
    main()
