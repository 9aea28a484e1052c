"""On a GPU: how long after a server process dies NVML still lists it holding its memory, and that the pool's wait
(telemetry.wait_released) sees it go. A stopped server's port frees when it exits; its GPU memory a moment later,
and the next 8 x 60 GB load must not start into it. Prints one line per try; run from the repo root."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from pytest_glm5.telemetry.nvml import gpu_processes, inventory, load_nvml, wait_released

HOLD = ("import torch, time; x = torch.empty(int(sys.argv[1]) * 2**30, dtype=torch.uint8, device='cuda'); "
        "x.fill_(1); torch.cuda.synchronize(); print('ready', flush=True); time.sleep(600)")


def main() -> int:
    """Three tries: a process holding GB on GPU 0 is killed; time until NVML no longer lists it."""
    nvml = load_nvml()
    gpus = inventory(nvml)
    if nvml is None or not gpus:
        print("no NVML GPU here")
        return 1
    uuid = gpus[0].uuid
    for gb in (8, 40, 100):
        proc = subprocess.Popen([sys.executable, "-c", "import sys; " + HOLD, str(gb)], stdout=subprocess.PIPE,
                                text=True, start_new_session=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        listed = gpu_processes([uuid], nvml).get(uuid, [])
        mine = [(pid, used) for pid, used in listed if pid == proc.pid]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        t0 = time.monotonic()
        said = wait_released([uuid], {proc.pid}, 120, nvml, poll_s=0.01)
        waited = time.monotonic() - t0
        handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
        while nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**30 > 2 and time.monotonic() - t0 < 120:
            time.sleep(0.01)
        back = time.monotonic() - t0
        print(f"{gb} GB: NVML listed pid {proc.pid} with {mine[0][1] if mine else '?'} GB; after SIGKILL and exit, "
              f"listed for {waited * 1000:.0f} ms more (wait_released: {said or 'released'}); the device's used "
              f"memory was under 2 GB {back * 1000:.0f} ms after the exit", flush=True)
        if not mine:
            print("NVML did not list the holding process: the wait would not have seen it")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
