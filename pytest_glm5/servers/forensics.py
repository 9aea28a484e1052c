"""Every failure's wording in one place: a server that would not start, crashed, hung, or stopped answering.

Each report says what happened, when, what was in flight, the log lines that say why (picked by the engine's
fatal patterns), and where the whole log is.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .process import ServerHandle

LOG_TAIL_LINES = 40
# What faulthandler writes for each thread: the sign that a stack dump really reached the log.
STACK_DUMP_MARKS = (b"most recent call first", b"Current thread 0x", b"Thread 0x")


def tail(path: Path | None, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last lines of a log file (empty if it does not exist)."""
    if path is None:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            return f.read().decode(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def describe_exit(code: int) -> str:
    """`exit code 1` or `signal SIGKILL`."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def startup_exit(name: str, code: int, elapsed: float, log: Path | None) -> str:
    """A server that exited before it was ready."""
    lines = tail(log)
    return (f"server for {name} exited during startup with {describe_exit(code)} after {elapsed:.1f} s; last "
            f"{len(lines)} log lines:\n" + "\n".join(lines) + f"\nfull log: {log}")


def startup_timeout(name: str, timeout: float, log: Path | None) -> str:
    """A server still not ready at the startup timeout."""
    lines = tail(log)
    return (f"server for {name} not ready after {timeout:g} s (--glm5-startup-timeout); last {len(lines)} log "
            "lines:\n" + "\n".join(lines) + f"\nfull log: {log}")


def preflight_rejected(name: str, engine: str, problem: str) -> str:
    """Flags the engine's own parser refused, before any model load."""
    return (f"{name}: {engine} rejects the flags: {problem} (argv checked by preflight in seconds, before any "
            "model load)")


def failed_earlier(name: str, message: str, picked: list[str]) -> str:
    """The one line later tests of a config that could not start get."""
    lines = message.splitlines()
    head = lines[0].split("; last ")[0]
    where = f"; {lines[-1]}" if len(lines) > 1 and lines[-1].startswith("full log:") else ""
    return f"server for {name} failed earlier: {head}" + "".join(f"; {p}" for p in picked) + where


def log_story(handle: ServerHandle, max_lines: int) -> tuple[list[str], list[str]]:
    """The log's last 400 lines and, of those, the last max_lines its engine's fatal patterns pick."""
    lines = tail(handle.log_path, 400)
    return lines, handle.engine.fatal_lines(lines)[-max_lines:]


def crash_reason(handle: ServerHandle, code: int, max_lines: int = 8) -> str:
    """How a server died: exit status, the log lines its engine's patterns pick, and the full log's path."""
    _, picked = log_story(handle, max_lines)
    log = handle.log_path
    text = describe_exit(code)
    if picked:
        text += "; " + " | ".join(picked)
    return text + (f"; full log: {log}" if log else "")


def crash_report(handle: ServerHandle, code: int, elapsed_s: float, completed: int, in_flight: int,
                 concurrency: int, failed: int = 0) -> str:
    """The failure of a load run whose server died: when, what was in flight, why (log lines), where the log is."""
    lines, picked = log_story(handle, 12)
    log = handle.log_path
    cut = f", {failed} cut off by the death" if failed else ""
    out = [f"server for {handle.config.name} died during the load run: {describe_exit(code)}, {elapsed_s:.1f} s "
           f"into the run at concurrency {concurrency}; {completed} requests completed{cut}, {in_flight} in flight "
           "when it was noticed"]
    if picked:
        out.append("log lines that matter:")
        out += [f"  {line}" for line in picked]
    else:
        out.append("last log lines:")
        out += [f"  {line}" for line in lines[-10:]]
    if log:
        out.append(f"full log: {log}")
    return "\n".join(out)


def request_stack_dump(handle: ServerHandle, wait_s: float = 1.0) -> str:
    """Ask a hung server for its stacks; say where they are only if they really reached the log."""
    sig = handle.engine.stack_dump_signal
    if sig is None or handle.pid is None:
        return f"no stack dump: {handle.engine.name} has no signal that dumps its stacks"
    log = handle.log_path
    before = log.stat().st_size if log and log.exists() else 0
    try:
        os.kill(handle.pid, sig)
    except (ProcessLookupError, PermissionError) as exc:
        return f"no stack dump: {sig.name} could not be sent ({exc.__class__.__name__})"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if log is not None and _grew_with_stacks(log, before):
            return f"stack dump ({sig.name}) written to the log"
    return f"asked for a stack dump ({sig.name}) but none reached the log within {wait_s:g} s"


def _grew_with_stacks(log: Path, offset: int) -> bool:
    with contextlib.suppress(OSError), open(log, "rb") as f:
        f.seek(offset)
        new = f.read(1 << 20)
        return any(mark in new for mark in STACK_DUMP_MARKS)
    return False


def hang_report(handle: ServerHandle, why: str | None, elapsed: float, concurrency: int, completed: int,
                in_flight: int) -> str:
    """A server alive but producing nothing: the same report as a crash, plus a stack dump where possible."""
    dumped = request_stack_dump(handle)
    log = handle.log_path
    lines = [f"server for {handle.config.name} hung during the load run: {why}, {elapsed:.1f} s into the run at "
             f"concurrency {concurrency}; {completed} requests completed, {in_flight} in flight; the process is alive "
             f"(pid {handle.pid})", dumped,
             "last log lines:"]
    lines += [f"  {ln}" for ln in tail(log, 10)]
    if log:
        lines.append(f"full log: {log}")
    return "\n".join(lines)


def not_answering(handle: ServerHandle, state: str, why: str) -> str:
    """A live process whose HTTP server does not answer (stopped, wedged): not a wrong URL."""
    log = handle.log_path
    return (f"server for {handle.config.name} (pid {handle.pid}) is alive but not answering at {handle.url}: "
            f"process state {state}; {why}" + (f"; full log: {log}" if log else ""))


def known_issue_mismatch(pattern: str, failure: str) -> str | None:
    """None when the failure's text matches the known issue's regex; else why the strict xfail does not hold."""
    if re.search(pattern, failure, re.MULTILINE):
        return None
    lines = [ln for ln in failure.splitlines() if ln.strip()]
    what = next((ln.strip() for ln in lines if ln.lstrip().startswith("E ")), lines[0].strip() if lines else "?")
    return (f"known issue did not match: {what[:300]} (known_issue_match = {pattern!r} in the configs file; "
            "another failure than the known one)")
