"""The emulator's scheduler: continuous batching over a performance model, in real or virtual time.

`Scheduler` holds the state and decides each step (prefill chunks first, as SGLang does, then one
decode step over every running request); `AsyncEngine` paces those steps on the event loop against
a deadline clock, so that slow handlers coalesce tokens into bigger chunks instead of slowing the model.
`simulate_closed_loop` runs the same scheduler in virtual time: that is how the profiles are calibrated.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .prefix import PrefixCache
from .profile import Model
from .speculative import Speculative, wrong_word

# Late steps within this many wall seconds are caught up by running the next ones back to back.
CATCH_UP_S = 0.05


@dataclass(eq=False)
class SimRequest:
    """One request inside the emulator."""

    rid: str
    prompt_len: int
    max_new_tokens: int
    stop_at: int
    arrival: float = 0.0
    prefilled: int = 0
    generated: int = 0
    finished: bool = False
    aborted: bool = False
    finish_reason: str = ""
    first_token_at: float = 0.0
    finished_at: float = 0.0  # perf_counter when the step that made its last token ended
    received_at: float = 0.0  # perf_counter when its HTTP handler started (the server's view of "sent")
    sent_first_at: float = 0.0  # when the handler wrote its first token to the stream
    sent_last_at: float = 0.0  # when the handler wrote its last token
    seq: int = 0
    waiter: asyncio.Future[None] | None = field(default=None, repr=False)
    words: list[str] | None = field(default=None, repr=False)  # a text prompt's reply (sim.answers); None: ids
    blocks: tuple[int, ...] = field(default=(), repr=False)  # its prompt's block hashes (sim.prefix)
    cached: int = 0  # prompt tokens the prefix cache held when it was admitted (their prefill skipped)
    accept_p: float = 0.0  # speculative decoding: the chance each draft is right (sim.speculative)
    spec_rng: random.Random | None = field(default=None, repr=False)  # its draws, from its prompt
    verify_ct: int = 0  # verify passes (SGLang's spec_verify_ct)
    correct_drafts: int = 0  # drafts accepted (spec_num_correct_drafts)

    @property
    def kv_tokens(self) -> int:
        """KV-cache tokens this request reserves while it runs."""
        return self.prompt_len + self.max_new_tokens


@dataclass
class Step:
    """One scheduled step: its kind, model duration and the requests it advances."""

    kind: str
    duration_s: float
    batch: list[SimRequest]
    chunk: list[tuple[SimRequest, int]] = field(default_factory=list)


class Crash(Exception):
    """The modelled server dies (the profile's failure rule fired)."""


class Scheduler:
    """SGLang-like continuous batching: FIFO admission under max-running and KV limits."""

    def __init__(self, model: Model, seed: int = 0, cache: PrefixCache | None = None,
                 spec: Speculative | None = None) -> None:
        self.model = model
        self.spec = spec  # None: no speculative decoding
        self.spec_verify_total = 0  # verify passes over every request (sglang:spec_verify_calls_total)
        self.spec_last_length = 0.0  # the last decode step's mean accept length (the sglang:spec_accept_length gauge)
        # Since the last /flush_cache, as SGLang's scheduler keeps them for avg_spec_accept_length (its flush_cache
        # calls metrics_reporter.reset_metrics): tokens of verify passes (no prefill's first token) and the passes.
        self.spec_flushed_tokens = 0
        self.spec_flushed_verifies = 0
        self.cache = cache  # None: --disable-radix-cache
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.kv_used = 0
        self.rng = random.Random(seed)
        self._noise = 0.0
        self.prompt_tokens_total = 0  # every prompt token, cached or computed (SGLang's counter)
        self.cached_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.max_running_seen = 0

    def submit(self, req: SimRequest) -> None:
        """Queue a request."""
        self.waiting.append(req)

    def idle(self) -> bool:
        """No request waits or runs."""
        return not self.waiting and not self.running

    def _admit(self) -> None:
        m = self.model
        while self.waiting and len(self.running) < m.max_running_requests:
            req = self.waiting[0]
            if req.aborted:
                self.waiting.popleft()
                continue
            if self.kv_used + req.kv_tokens > m.kv_capacity_tokens and self.running:
                break
            self.waiting.popleft()
            self.kv_used += req.kv_tokens
            if self.cache is not None and req.blocks:
                req.cached = req.prefilled = self.cache.admit(req.blocks, req.prompt_len)
                self.prompt_tokens_total += req.cached
                self.cached_tokens_total += req.cached
            self.running.append(req)
        self.max_running_seen = max(self.max_running_seen, len(self.running))

    def noise_factor(self) -> float:
        """AR(1) multiplicative noise on step times: drifts over a run, seeded."""
        m = self.model
        if m.noise_cv <= 0:
            return 1.0
        rho = m.noise_correlation
        self._noise = rho * self._noise + math.sqrt(1 - rho * rho) * m.noise_cv * self.rng.gauss(0.0, 1.0)
        return max(0.2, 1.0 + self._noise)

    def next_step(self) -> Step | None:
        """Decide the next step, or None when there is nothing to do."""
        self.running = [r for r in self.running if not r.aborted or self._release(r)]
        self._admit()
        if not self.running:
            return None
        m = self.model
        failure = m.failure
        if failure and failure.phase == "load" and len(self.running) >= failure.running_at_least:
            raise Crash(failure.kind)
        pending = [r for r in self.running if r.prefilled < r.prompt_len]
        if pending:
            budget = m.max_prefill_tokens
            chunk: list[tuple[SimRequest, int]] = []
            for r in pending:
                if budget <= 0:
                    break
                take = min(r.prompt_len - r.prefilled, budget)
                chunk.append((r, take))
                budget -= take
            tokens = sum(n for _, n in chunk)
            return Step("prefill", m.prefill_step_s(tokens) * self.noise_factor(), [r for r, _ in chunk], chunk)
        batch = list(self.running)
        if self.spec is not None:
            # The verify pass is a decode step over every draft token of the batch; the draft passes come before it.
            duration = m.decode_step_s(len(batch) * self.spec.draft_tokens) + m.decoding(self.spec.draft_s(len(batch)))
            return Step("decode", duration * self.noise_factor(), batch)
        duration = m.decode_step_s(len(batch)) * m.decode_steps * self.noise_factor()
        return Step("decode", duration, batch)

    def _release(self, req: SimRequest) -> bool:
        self.kv_used -= req.kv_tokens
        return False

    def apply(self, step: Step, now: float) -> list[SimRequest]:
        """Advance the requests of a finished step; return those that got new tokens."""
        touched: list[SimRequest] = []
        if step.kind == "prefill":
            for r, n in step.chunk:
                r.prefilled += n
                self.prompt_tokens_total += n
                if r.prefilled >= r.prompt_len and not r.aborted:
                    r.first_token_at = now
                    self._emit(r, 1)
                    touched.append(r)
        else:
            yielded = 0
            for r in step.batch:
                if r.aborted or r.finished:
                    continue
                n = self._verify(r) if self.spec is not None else self.model.decode_steps
                yielded += n
                self._emit(r, n)
                touched.append(r)
            if self.spec is not None and touched:
                self.spec_last_length = yielded / len(touched)
        for r in touched:
            if r.finished:
                r.finished_at = now
                self.running.remove(r)
                self.kv_used -= r.kv_tokens
                self.requests_total += 1
        return touched

    def _verify(self, r: SimRequest) -> int:
        """One verify pass of a request: the tokens it yields (its accepted drafts and the bonus token)."""
        spec = self.spec
        assert spec is not None
        rng = r.spec_rng or self.rng
        k = spec.accepted(rng, r.accept_p, r.stop_at - r.generated - 1)
        if spec.lossy and r.words is not None:
            # A lossy verify keeps a wrong draft now and then: the reply is no longer the target model's.
            for at in range(r.generated, min(r.generated + k, len(r.words))):
                if rng.random() < spec.lossy:
                    r.words[at] = wrong_word(r.words[at], rng)
        r.verify_ct += 1
        r.correct_drafts += k
        self.spec_verify_total += 1
        self.spec_flushed_verifies += 1
        self.spec_flushed_tokens += k + 1
        return k + 1

    def flush_spec(self) -> None:
        """/flush_cache: SGLang's scheduler resets the totals its avg_spec_accept_length reads (reset_metrics)."""
        self.spec_flushed_tokens = self.spec_flushed_verifies = 0

    def _emit(self, r: SimRequest, n: int) -> None:
        n = min(n, r.stop_at - r.generated)
        r.generated += n
        self.generation_tokens_total += n
        if r.generated >= r.stop_at:
            r.finished = True
            r.finish_reason = "length" if r.stop_at >= r.max_new_tokens else "stop"

    def stop_point(self, max_new_tokens: int, ignore_eos: bool) -> int:
        """Where a request ends: max_new_tokens, or earlier at a seeded EOS when EOS is honoured."""
        p = self.model.eos_per_token
        if ignore_eos or p <= 0:
            return max_new_tokens
        u = self.rng.random()
        at = int(math.log(max(u, 1e-12)) / math.log(1 - p)) + 1
        return max(1, min(at, max_new_tokens))


class AsyncEngine:
    """Drives a Scheduler on the event loop, time-scaled, and reports when it falls behind its model."""

    def __init__(self, scheduler: Scheduler, time_scale: float,
                 on_step: Callable[[Step, float], None] | None = None, max_wakeups_per_s: float = 8000.0) -> None:
        self.s = scheduler
        self.max_wakeups_per_s = max_wakeups_per_s
        self.steps = 0
        self.coalesce = 1
        self.hang_after_tokens: int | None = None
        self.jit_pause_s = 0.0  # wall seconds a decode batch of a size never seen before waits, as a JIT compile does
        self.jit_seen = 0
        self._seq = 0
        self.scale = time_scale
        self.on_step = on_step
        self._wake = asyncio.Event()
        self.lag_s = 0.0
        self.max_lag_s = 0.0
        self.behind_s_total = 0.0
        self.busy_s_total = 0.0
        self.crash: str | None = None

    def coalesce_factor(self, streams: int, step_wall_s: float) -> int:
        """Steps per stream wake-up that keep wake-ups within max_wakeups_per_s."""
        if streams <= 1 or step_wall_s <= 0:
            return 1
        k = math.ceil(streams / (self.max_wakeups_per_s * step_wall_s))
        self.coalesce = max(1, k)
        return self.coalesce

    def submit(self, req: SimRequest) -> None:
        """Queue a request and wake the loop."""
        self._seq += 1
        req.seq = self._seq
        req.arrival = time.perf_counter()
        self.s.submit(req)
        self._wake.set()

    async def run(self) -> None:
        """The step loop; returns only when the modelled server crashes (self.crash says why)."""
        loop = asyncio.get_running_loop()
        deadline = busy_since = loop.time()
        while True:
            try:
                step = self.s.next_step()
            except Crash as exc:
                self.crash = str(exc)
                return
            if self.hang_after_tokens is not None and self.s.generation_tokens_total >= self.hang_after_tokens:
                await asyncio.Event().wait()  # A hung scheduler: no step ever again, HTTP still answers.
            if step is None:
                self.busy_s_total += loop.time() - busy_since
                self._wake.clear()
                await self._wake.wait()
                deadline = busy_since = loop.time()
                continue
            if self.jit_pause_s and step.kind == "decode" and len(step.batch) > self.jit_seen:
                # FlashInfer compiles a kernel for a batch shape it has not met: its JIT logger says so, and the
                # whole server waits (the load generator must not call that a hang).
                self.jit_seen = len(step.batch)
                name = f"fused_moe_fp4_sm120_bs{self.jit_seen}"
                print(f"flashinfer.jit: Loading JIT ops: {name}", flush=True)
                await asyncio.sleep(self.jit_pause_s)
                print(f"flashinfer.jit: Finished loading JIT ops: {name}", flush=True)
                deadline = busy_since = loop.time()
            deadline += step.duration_s * self.scale
            delay = deadline - loop.time()
            self.lag_s = max(0.0, -delay)
            self.max_lag_s = max(self.max_lag_s, self.lag_s)
            if delay > 0:
                await asyncio.sleep(delay)
            elif -delay > CATCH_UP_S:
                # Too far behind the model to catch up: the time is lost; count it (on /metrics).
                self.behind_s_total += -delay
                deadline = loop.time()
                await asyncio.sleep(0)
            else:
                await asyncio.sleep(0)
            now = time.perf_counter()
            touched = self.s.apply(step, now)
            self.steps += 1
            k = self.coalesce_factor(len(touched), step.duration_s * self.scale)
            for r in touched:
                if r.waiter is None or r.waiter.done():
                    continue
                # Under load, wake each stream every k-th step (staggered): fewer, bigger chunks, as a
                # larger --stream-interval gives, so the handlers never hold back the model's clock.
                if k == 1 or r.finished or r.generated <= 1 or (self.steps + r.seq) % k == 0:
                    r.waiter.set_result(None)
            if self.on_step:
                self.on_step(step, now)


def simulate_closed_loop(model: Model, concurrency: int, num_requests: int, input_len: int,
                         output_len: int, seed: int = 0, spec: Speculative | None = None,
                         accept_p: float = 0.0) -> dict[str, float]:
    """Virtual-time closed loop (what `glm5 bench` would measure at time scale 1, client cost zero); with `spec`,
    every request's drafts right with chance `accept_p`."""
    sched = Scheduler(model, seed, spec=spec)
    clock = 0.0
    issued = 0
    done = 0
    output = 0

    def issue() -> None:
        nonlocal issued
        req = SimRequest(rid=str(issued), prompt_len=input_len, max_new_tokens=output_len,
                         stop_at=output_len, arrival=clock, accept_p=accept_p)
        issued += 1
        sched.submit(req)

    for _ in range(min(concurrency, num_requests)):
        issue()
    ttfts: list[float] = []
    tokens = verifies = 0
    while done < num_requests:
        step = sched.next_step()
        if step is None:
            break
        clock += step.duration_s
        for r in sched.apply(step, clock):
            if r.generated == 1 or (step.kind == "prefill"):
                ttfts.append(clock - r.arrival)
            if r.finished:
                done += 1
                output += r.generated
                tokens, verifies = tokens + r.generated, verifies + r.verify_ct
                if issued < num_requests:
                    issue()
    return {
        "spec_accept_length": tokens / verifies if verifies else 0.0,
        "duration": clock,
        "output_throughput": output / clock,
        "total_throughput": (output + done * input_len) / clock,
        "mean_ttft_ms": 1000 * sum(ttfts) / max(1, len(ttfts)),
    }
