"""Load against a watched server: a death or a stall ends the run at once and becomes a forensic report;
the stability check holds a sustained run to "nothing went wrong"."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from ..load import clock, servermetrics
from ..load.client import PREFLIGHT_TIMEOUT_S, run_workload
from ..load.types import BenchError, BenchResult, Unreachable, Workload
from ..servers import forensics
from ..servers.process import Progress, ServerHandle, cpu_wait_s, http_get, process_state
from ..telemetry.energy import EnergyMeter
from ..telemetry.energy import Window as EnergyWindow
from ..telemetry.nvml import Sampler, load_nvml, power_samples

READY_AGAIN_S = 30.0
MEMORY_GROWTH_GB = 1.0  # more than this between the first and last quarter of a run is a leak, not noise


@dataclass
class Measured:
    """A result, or the one-paragraph reason there is none worth judging."""

    result: BenchResult | None
    problem: str | None = None
    not_answering: bool = False  # alive but stuck (hung, stopped): the server must be stopped, not waited on


def measure(server: ServerHandle, workload: Workload, progress: Progress | None = None) -> Measured:
    """Run the workload; abort within ~0.1 s of the server's death or past the stall timeout, and say why. An
    emulator runs a point its host cannot keep up with on a slower clock, and again slower where it still fell
    behind; the figures come back on the launch's clock (load/clock.py)."""
    by = clock.factor(workload, server.engine.time_scale)
    while True:
        m = _measure_at(server, workload, progress, by)
        slower = clock.again(workload, by, m.result) if m.problem is None else None
        if slower is None:
            return m
        if progress is not None and m.result is not None:
            fell = clock.behind(m.result) * 100
            progress(server.config.name, 0.0, f"the emulator fell behind its model for {fell:.0f}% of "
                     f"{workload.label()} at {by:g}x its clock: measured again at {slower:g}x", "measuring")
        by = slower


class _CompileWatch:
    """Whether the server's log says a compile is under way: a stall then is a pause, not a hang."""

    def __init__(self, server: ServerHandle) -> None:
        self.server = server
        self.log = server.log_path
        self.seen = self.log.stat().st_size if self.log and self.log.exists() else 0
        self.open: str | None = None

    def __call__(self) -> str | None:
        # A new compile line since the last look, or a started one (FlashInfer's "Loading JIT ops") not yet
        # finished. An old, finished one excuses nothing.
        if self.log is None or not self.log.exists():
            return None
        size = self.log.stat().st_size
        lines = _read_from(self.log, self.seen)
        self.seen = size
        news = [ln for ln in lines if self.server.engine.compiling_line([ln])]
        for line in news:
            self.open = None if "Finished" in line else line.strip()
        return self.server.engine.compiling_line(news) or self.open


def _measure_at(server: ServerHandle, workload: Workload, progress: Progress | None, by: float) -> Measured:
    t0 = time.monotonic()

    def died() -> str | None:
        code = server.exit_code()
        return None if code is None else f"server exited ({forensics.describe_exit(code)})"

    nvml = load_nvml()
    sampler = Sampler(nvml).start() if nvml is not None else None
    meter = EnergyMeter(nvml, range(int(nvml.nvmlDeviceGetCount()))).start() if nvml is not None else None
    # A stopped process answers nothing: the side reads would each wait out their timeout before the load's
    # preflight names the state.
    stopped = process_state(server.pid).startswith("stopped")
    behind = None if stopped else server.engine.lag_seconds(server.url)
    waited = None if stopped else cpu_wait_s(server.pid)
    counted = None if stopped else servermetrics.snapshot(server.url)
    if by != 1.0 and not server.engine.slow_clock(server.url, by):
        by = 1.0
    try:
        label = f"{server.config.name} {workload.label()}"
        said = (lambda line, elapsed: progress(label, elapsed, line, "measuring")) if progress is not None else None
        result = run_workload(server.url, workload, stop_check=died, model_hint=server.model,
                              busy_check=_CompileWatch(server), progress=said)
    except BenchError as exc:
        return _no_result(server, workload, exc, t0)
    finally:
        now_waited = cpu_wait_s(server.pid) if waited is not None else None
        if by != 1.0:
            server.engine.slow_clock(server.url, 1.0)  # the canary, the stability run and the next point: as launched
        telemetry = sampler.stop() if sampler is not None else None
        window = meter.stop(power_samples(telemetry)) if meter is not None else None
    result.telemetry = telemetry
    _count_energy(result, window)
    result.server = servermetrics.view(counted, servermetrics.snapshot(server.url) if counted is not None else None)
    if result.server is not None:
        result.server_note = result.server.mismatch(result.completed_total, result.tokens_total)
    after = server.engine.lag_seconds(server.url) if behind is not None else None
    if behind is not None and after is not None:
        result.lag_s = max(0.0, after - behind)
    if waited is not None and now_waited is not None:
        result.wait_s = max(0.0, now_waited - waited)
    return _ended(server, clock.on_launch_clock(result, by), t0)


def _no_result(server: ServerHandle, workload: Workload, exc: BenchError, t0: float) -> Measured:
    """Why a run that raised measured nothing: the server's death, a server that does not answer, or the error."""
    code = server.exit_code()
    if code is not None:
        return Measured(None, forensics.crash_report(server, code, time.monotonic() - t0, 0, 0, workload.concurrency))
    if isinstance(exc, Unreachable) and server.pid is not None:
        # Our own process is alive, so the URL is right: it is the server that does not answer.
        why = f"nothing answered within {PREFLIGHT_TIMEOUT_S:g} s ({exc.cause})"
        return Measured(None, forensics.not_answering(server, process_state(server.pid), why), not_answering=True)
    return Measured(None, f"{server.config.name}: {exc}")


def _count_energy(result: BenchResult, window: EnergyWindow | None) -> None:
    """The energy NVML counted over the run, and the tokens and requests it bought."""
    if window is None or not window.joules:
        return
    result.energy = window
    if window.total_j > 0:
        result.metrics["output_tokens_per_joule"] = result.tokens_total / window.total_j
        if result.completed_total:  # the energy a request cost: lower is better, as a latency
            result.metrics["joules_per_request"] = window.total_j / result.completed_total


def _ended(server: ServerHandle, result: BenchResult, t0: float) -> Measured:
    """The result, with the report of the hang or death that ended it early."""
    if result.stalled:
        return Measured(result, forensics.hang_report(
            server, result.aborted, time.monotonic() - t0, result.workload.concurrency,
            int(result.metrics["completed"]), result.in_flight_at_abort), not_answering=True)
    code = server.exit_code()
    if result.aborted or code is not None:
        # The death may end every request before the watcher's next look: the process state decides.
        return Measured(result, forensics.crash_report(
            server, code if code is not None else -9, time.monotonic() - t0, int(result.metrics["completed"]),
            result.in_flight_at_abort, result.workload.concurrency, failed=cut_off(result)))
    return Measured(result)


@dataclass
class Stability:
    """The verdict of a sustained run: ok only if nothing at all went wrong."""

    problems: list[str] = field(default_factory=list)
    result: BenchResult | None = None
    not_answering: bool = False

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems


def check_stability(server: ServerHandle, workload: Workload, error_budget: int = 0) -> Stability:
    """Sustained closed-loop load; then: alive, within the error budget, ready again, no fatal log line, and
    every completed request exactly `output_len` tokens long."""
    log = server.log_path
    offset = log.stat().st_size if log and log.exists() else 0
    m = measure(server, workload)
    out = Stability(result=m.result, not_answering=m.not_answering)
    if m.problem:
        out.problems.append(m.problem)
        return out
    assert m.result is not None
    r = m.result
    if r.failed > error_budget:
        out.problems.append(f"{r.failed} of {workload.num_prompts} requests failed (error budget {error_budget}): "
                            + "; ".join(r.errors[:3]))
    wrong = [f"{rec.output_len} of {rec.asked}" for rec in r.records if rec.success and rec.output_len != rec.asked]
    if wrong:
        out.problems.append(f"{len(wrong)} completed requests did not produce exactly the tokens asked "
                            f"(e.g. {', '.join(wrong[:5])})")
    if r.telemetry is not None:
        grown = {g: d for g, d in r.telemetry.memory_growth_gb().items() if d > MEMORY_GROWTH_GB}
        if grown:
            out.problems.append("GPU memory kept growing across the run: " + ", ".join(
                f"GPU {g} +{d:.2f} GB (last quarter vs first)" for g, d in grown.items()))
    code = server.exit_code()
    if code is not None:
        out.problems.append(f"server exited with {forensics.describe_exit(code)} right after the load")
    elif not _ready_again(server):
        out.problems.append(f"server not ready again within {READY_AGAIN_S:.0f} s after the load")
    if log:
        new_lines = _read_from(log, offset)
        fatal = server.engine.fatal_lines(new_lines)
        if fatal:
            out.problems.append("fatal lines in the server log during the run:\n" + "\n".join(
                f"  {ln}" for ln in fatal[:12]) + f"\nfull log: {log}")
    return out


def _ready_again(server: ServerHandle) -> bool:
    deadline = time.monotonic() + READY_AGAIN_S
    while time.monotonic() < deadline:
        if any(http_get(server.url + p, timeout=5)[0] == 200 for p in server.engine.ready_paths):
            return True
        time.sleep(0.25)
    return False


def _read_from(path: os.PathLike[str], offset: int) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def cut_off(result: BenchResult) -> int:
    """Requests that were on the server when it died: failed ones sent before the first failure came back.
    Requests sent after that met a dead server and never ran, so they are not counted."""
    failed = [r for r in result.records if not r.success]
    if not failed:
        return 0
    first_end = min(r.start + r.latency for r in failed)
    return min(sum(1 for r in failed if r.start <= first_end), result.workload.concurrency)
