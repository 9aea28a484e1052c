"""What NVML's energy and clock-event counters say on a real GPU, through pytest_glm5.energy (the device tool's H200):
idle, then a bf16 matmul load, each window metered by the energy counter and by integrated sampled power side by
side, with the enforced power limit and the clock-event seconds. Prints one line per window and a JSON summary.

    python scripts/gpu_energy_check.py --seconds 60 --json energy.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_glm5.telemetry.energy import EnergyMeter, field_ids, integrated_j
from pytest_glm5.telemetry.nvml import Sampler, load_nvml, power_samples


def window(nvml: object, seconds: float, load: bool) -> dict[str, Any]:
    """One window: energy by counter and by integrated power, power limit, clock-event seconds."""
    sampler = Sampler(nvml, hz=10.0).start()  # type: ignore[arg-type]
    meter = EnergyMeter(nvml, [0]).start()  # type: ignore[arg-type]
    end = time.monotonic() + seconds
    if load:
        import torch

        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        while time.monotonic() < end:
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()
    else:
        time.sleep(seconds)
    telemetry = sampler.stop()
    w = meter.stop()
    sampled = integrated_j(power_samples(telemetry).get(0, []))
    counted = w.joules.get(0)
    span = telemetry.samples[-1]["t"] - telemetry.samples[0]["t"] if len(telemetry.samples) > 1 else 0.0
    # The sampled integral covers the samples' span; the counter the window's: compare mean powers.
    agree = (counted / w.seconds) / (sampled / span) - 1 if counted and sampled and span else None
    return {"load": load, "seconds": w.seconds, "counter_j": counted, "counter_w": counted / w.seconds if counted
            else None, "sampled_j": sampled, "sampled_w": sampled / span if span else None, "agree": agree,
            "power_limit_w": w.power_limit_w.get(0), "throttle_s": w.throttle_s.get(0), "power_line": w.power_line(),
            "not_comparable": w.throttled(), "power": w.power()}


def main() -> int:
    """Idle and loaded windows on GPU 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--json", type=Path)
    ns = ap.parse_args()
    nvml = load_nvml()
    if nvml is None:
        print("gpu_energy_check: no NVML here")
        return 2
    import pynvml

    print(f"binding {getattr(pynvml, '__version__', '?')}, clock-event fields {field_ids(nvml)}")
    out = [window(nvml, 10.0, load=False), window(nvml, ns.seconds, load=True)]
    for w in out:
        agree = f"{w['agree'] * 100:+.1f}%" if w["agree"] is not None else "n/a"
        print(f"{'load' if w['load'] else 'idle'} {w['seconds']:.1f} s: counter {w['counter_w'] or 0:.0f} W, sampled "
              f"{w['sampled_w'] or 0:.0f} W (counter vs sampled {agree}); limit {w['power_limit_w']} W; "
              f"clock events {w['throttle_s']}; {w['power_line']}; {w['not_comparable'] or 'comparable'}; "
              f"recorded with a reference: {w['power']}")
    if ns.json:
        ns.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
