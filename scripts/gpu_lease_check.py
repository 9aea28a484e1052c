"""What only a GPU shows of leases: a lease taken from NVML's inventory puts a CUDA process on that very GPU.

    python3 scripts/gpu_lease_check.py        # on a GPU machine, from the repo root (scripts/gpu_check.sh runs it)

For each GPU: lease it (by UUID), start a torch process with the lease's environment (CUDA_VISIBLE_DEVICES=<index>,
CUDA_DEVICE_ORDER=PCI_BUS_ID) that allocates on cuda:0, and check that torch's device UUID is the lease's and that
NVML lists the process on that GPU. Then the same with an outer CUDA_VISIBLE_DEVICES given as a UUID, and the
message of a config that needs more GPUs than the machine has. Prints one line per check and exits 1 if one fails:

    lease GPU 0 (GPU-3f1c...): torch cuda:0 is GPU-3f1c... ; NVML lists pid 4242 on it: ok
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_glm5.servers.leases import Device, LeaseError, book_for
from pytest_glm5.telemetry.nvml import inventory, load_nvml

PROBE = ("import sys, time, torch\n"
         "x = torch.ones(1 << 20, device='cuda')\n"
         "print('GPU-' + str(torch.cuda.get_device_properties(0).uuid), torch.cuda.device_count(), flush=True)\n"
         "time.sleep(60)\n")


def probe(env: dict[str, str]) -> tuple[subprocess.Popen[str], str, int]:
    """A torch process on the leased GPU: (process, its cuda:0 UUID, devices it sees)."""
    proc = subprocess.Popen([sys.executable, "-c", PROBE], env={**os.environ, **env}, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    uuid, count = proc.stdout.readline().split()
    return proc, uuid, int(count)


def on_gpu(uuid: str, pid: int) -> bool:
    """NVML lists the process among that GPU's compute processes."""
    nvml = load_nvml()
    assert nvml is not None
    handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
    for _ in range(20):
        if pid in {p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}:
            return True
        time.sleep(0.25)
    return False


def main() -> int:
    """Run the checks; one line each."""
    gpus = inventory()
    if not gpus:
        print("no NVML GPUs here")
        return 1
    devices = [Device(g.index, g.uuid) for g in gpus]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for outer in (None, devices[-1].uuid):
            book = book_for(devices, f"{len(gpus)} GPUs (NVML)", outer, Path(tmp), exclusive=False)
            assert book is not None
            lease = book.acquire("probe", 1)
            proc, uuid, count = probe(lease.env())
            try:
                ok = uuid == lease.devices[0].uuid and count == 1 and on_gpu(uuid, proc.pid)
            finally:
                proc.kill()
                proc.wait()
                book.release(lease)
            failed += not ok
            how = f"outer CUDA_VISIBLE_DEVICES={outer}" if outer else "NVML inventory"
            print(f"lease GPU {lease.indices[0]} ({lease.devices[0].uuid}) from {how}: torch cuda:0 is {uuid}, "
                  f"sees {count} device(s); NVML lists pid {proc.pid} on it: {'ok' if ok else 'FAILED'}")
        assert book is not None
        try:
            book.check("tp8", len(devices) + 7, f"tp-size {len(devices) + 7}")
            print("a config needing more GPUs than exist was accepted: FAILED")
            failed += 1
        except LeaseError as exc:
            print(f"too many GPUs: {exc}: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
