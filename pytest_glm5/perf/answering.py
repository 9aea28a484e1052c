"""What each launch answers, checked before its load: the canary on every launch, the accuracy set on a config's
first launch of the run. A launch that answers wrong makes its figures INVALID ("faster, but wrong"): the gate
marks them, the run fails, and --update-baselines records nothing of that config.

Costs are seconds per launch (a launch of GLM-5 is 30-50 minutes): 16 prompts of 32 tokens at once, and the accuracy
set once a night, 32 questions at a time. Each launch's checks are timed, and --update-baselines records the times
with the launch costs (`times()`), so the plan prices them (night/plan.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import Timeout

from ..correctness import canary
from ..correctness.answers import AnswersError, AnswerStore, answers_path
from ..correctness.paired import Accuracy, judge_accuracy
from ..correctness.questions import Question, QuestionsError, correct, generate, load_jsonl
from ..judge.baselines import baseline_path
from ..judge.provenance import Provenance
from ..judge.verdicts import Verdict
from ..load.replies import Reply, ask, unit_of
from ..servers.process import ServerHandle, process_state
from ..settings import Settings, SettingsError, generated_set

ACCURACY_MAX_TOKENS = 512  # a worked GSM8K answer fits; the emulator's are about 30


def parse_accuracy_set(spec: str, here: Path) -> tuple[str, list[Question]]:
    """`generated:N[:SEED]` or a GSM8K JSONL path (relative to `here`, where pytest was invoked): its name (recorded
    with the reference) and its questions."""
    try:
        generated = generated_set(spec)  # the settings' own rule, so the option and this read agree
    except ValueError as exc:
        raise QuestionsError(f"--glm5-accuracy-set = {spec!r} {exc}") from None
    if generated is not None:
        n, seed = generated
        return f"generated:{n}:{seed}", generate(n, seed)
    path = Path(spec).expanduser()
    path = path if path.is_absolute() else here / path
    if not path.is_file():
        raise QuestionsError(f"--glm5-accuracy-set = {spec!r}: no such file ({path}); point it at GSM8K's test.jsonl "
                             "or use generated:N")
    return path.name, load_jsonl(path)


@dataclass
class LaunchAnswers:
    """What one launch answered: the canary's check (or why none), the accuracy judged, the seconds each took."""

    config: str
    launch: str
    canary: canary.CanaryCheck | None = None
    canary_note: str = ""
    accuracy: Accuracy | None = None
    accuracy_note: str = ""
    canary_s: float | None = None  # None: not asked
    accuracy_s: float | None = None
    store: AnswerStore | None = field(default=None, repr=False)
    replies: list[Reply] = field(default_factory=list, repr=False)
    right: list[bool] = field(default_factory=list, repr=False)
    tokens: list[int] = field(default_factory=list, repr=False)
    held_to: str = ""  # whose canary replies this launch's were held to (a speculative config: its lossless one)

    @property
    def invalid(self) -> str | None:
        """Why this launch's figures are not the build's speed (None: its answers held)."""
        if self.canary is not None and not self.canary.ok:
            return "faster, but wrong: " + self.canary.line()
        if self.accuracy is not None and self.accuracy.failed:
            return "faster, but wrong: " + self.accuracy.line()
        return None


class Answering:
    """The run's answer checks: one per launch, the config's accuracy once, the reference files, the summary."""

    def __init__(self, root: Path, canary_on: bool, accuracy_set: str | None, alpha: float, recording: bool,
                 here: Path | None = None, stall_s: float = 120.0) -> None:
        self.root = root  # the baselines root: the answers files lie beside the baselines files
        # A reply that takes twice the stall timeout is a server that stopped: the check gives up and says so, and the
        # load that follows meets the hang with its own watcher (and its stack dump), instead of waiting 10 minutes.
        self.timeout_s = 2 * stall_s
        self.canary_on = canary_on
        self.alpha = alpha
        self.recording = recording
        self.accuracy_name, self.questions = (parse_accuracy_set(accuracy_set, here or Path.cwd()) if accuracy_set
                                              else ("", []))
        self.launches: dict[str, LaunchAnswers] = {}  # launch id -> what it answered
        self.stores: dict[Path, AnswerStore] = {}
        self.errors: list[str] = []  # answers files asked for and not written (the outcome counts them)
        self.recorded: list[str] = []  # what --update-baselines recorded of them, and what it refused
        self.told: list[str] = []  # xdist's controller: the workers' answer lines
        self.establishing = recording  # --update-baselines: a config without reference answers is being given them
        self.turned_off = False  # --glm5-no-accuracy or --glm5-no-canary: the outcome says what checked the answers
        self.unwritten: set[str] = set()  # --update-baselines: configs whose answers file could not be written
        self.told_unchecked: dict[str, str] = {}  # xdist's controller: the workers' unchecked configs

    @classmethod
    def from_settings(cls, s: Settings) -> Answering:
        """The run's checks: the canary unless --glm5-no-canary, the accuracy set if one is named; SettingsError
        when the set cannot be read."""
        try:
            recording = bool(s.update_baselines) and not s.ab
            run = cls(s.baselines_root, not s.no_canary, None if s.no_accuracy else s.accuracy_set, s.alpha,
                      recording, s.invocation_dir, s.stall_timeout)
            run.turned_off = s.no_accuracy or s.no_canary
            return run
        except QuestionsError as exc:
            raise SettingsError(str(exc)) from None

    def check_files(self, wanted: dict[str, tuple[str, str]]) -> None:
        """Read each config's answers file now, before the first launch, as the baselines are read: AnswersError
        names a file that cannot be read or is of another shape, and one whose canary replies answered other prompts
        than this version asks (unless --update-baselines records them again). A bad file never turns the check
        off: it stops the run with the file and the fix."""
        if not self.canary_on and not self.questions:
            return
        for config, (hw, model) in wanted.items():
            store = self._store_at(hw, model)
            asked = store.canary_asked(config)
            if self.canary_on and not self.establishing and asked is not None and asked != canary.asked_id():
                raise AnswersError(f"{store.path}: the canary replies of {config} answered other prompts (digest "
                                   f"{asked}; this version asks {canary.asked_id()}): record them again with "
                                   "--update-baselines, or restore the file from git")

    def coverage(self) -> str | None:
        """What checks the answers where a check was turned off (--glm5-no-accuracy, --glm5-no-canary):
        `correctness: canary only` (the outcome line says it, so a night without its accuracy set never reads as one
        with it); None where none was."""
        if not self.turned_off:
            return None
        return ("correctness: canary only" if self.canary_on else
                f"correctness: accuracy set only ({self.accuracy_name})" if self.questions else
                "correctness: not checked (--glm5-no-canary, no accuracy set)")

    def unchecked(self) -> dict[str, str]:
        """The configs whose answers no check held to a reference tonight, and why (no reference replies, a canary
        that could not run): the outcome says it, and under CI=true or --glm5-require-baselines fails. A recording
        run gives them their reference, so it has none."""
        out = dict(self.told_unchecked)
        if self.establishing or not (self.canary_on or self.questions):
            return out
        for config, mine in self._by_config().items():
            if not any(a.canary is not None or a.accuracy is not None for a in mine):
                why = next((n for a in mine for n in (a.canary_note, a.accuracy_note) if n), "no check ran")
                out[config] = why.removeprefix("canary: ")
        return out

    def _by_config(self) -> dict[str, list[LaunchAnswers]]:
        """The run's launches by config, in the order the configs first launched."""
        out: dict[str, list[LaunchAnswers]] = {}
        for a in self.launches.values():
            out.setdefault(a.config, []).append(a)
        return out

    def _store(self, prov: Provenance) -> AnswerStore:
        return self._store_at(prov.hardware, prov.model)

    def _store_at(self, hardware: str, model: str) -> AnswerStore:
        """The answers file of a (hardware, model), read once a run."""
        path = answers_path(baseline_path(self.root, hardware, model))
        if path not in self.stores:
            self.stores[path] = AnswerStore(path)
        return self.stores[path]

    def _wrong(self, config: str) -> str | None:
        """Why every figure of this config tonight is invalid: a launch of it answered wrong, or its accuracy (asked
        once a night, it holds for every launch) dropped."""
        mine = [a for a in self.launches.values() if a.config == config]
        return next((a.invalid for a in mine if a.accuracy is not None and a.accuracy.failed), None)

    def on_launch(self, server: ServerHandle, prov: Provenance, launch: str) -> str | None:
        """Check a launch before its first load (once): why its figures are invalid, None when its answers held."""
        config = server.config.name
        if launch in self.launches:
            return self.launches[launch].invalid or self._wrong(config)
        first = not any(a.config == config for a in self.launches.values())
        done = LaunchAnswers(config, launch)
        self.launches[launch] = done
        if not self.canary_on and not (first and self.questions):
            return None
        state = process_state(server.pid)
        if state.startswith("stopped"):
            # A stopped process answers nothing: the load's preflight names it in 5 s; asking here would wait
            # out the checks' timeout (twice the stall timeout) first.
            done.canary_note = f"canary not run: the server's process is {state}"
            return None
        try:
            store = done.store = self._store(prov)
        except AnswersError as exc:
            done.canary_note = str(exc)
            return None
        protocol = server.config.protocol or server.engine.protocol
        # The id the load client also asks by: the served name, else the model it was launched with (transformers
        # serve pins that one and answers 400 to "default", as the H200 showed).
        model = str(server.server_info().get("served_model_name") or server.model or "default")
        if self.canary_on:
            t0 = time.monotonic()
            self._canary(server.url, protocol, model, store, done, server.config.lossless_reference)
            done.canary_s = time.monotonic() - t0
        if first and self.questions:
            t0 = time.monotonic()
            self._accuracy(server.url, protocol, model, store, done)
            done.accuracy_s = time.monotonic() - t0
        return done.invalid or self._wrong(config)

    def times(self) -> dict[str, dict[str, float]]:
        """What the checks took, per config, for the launch costs: the canary's median a launch, the accuracy set
        and its size, and all the checks of its first launch (which its first launch's measuring held)."""
        out: dict[str, dict[str, float]] = {}
        for config, mine in self._by_config().items():
            canary_s = sorted(a.canary_s for a in mine if a.canary_s is not None)
            timed: dict[str, float] = {"first_s": (mine[0].canary_s or 0.0) + (mine[0].accuracy_s or 0.0)}
            if canary_s:
                timed["canary_s"] = canary_s[len(canary_s) // 2]
            if mine[0].accuracy_s is not None and mine[0].right:
                timed |= {"accuracy_s": mine[0].accuracy_s, "questions": float(len(self.questions))}
            out[config] = timed
        return out

    def _canary(self, url: str, protocol: str, model: str, store: AnswerStore, done: LaunchAnswers,
                held_to: str | None = None) -> None:
        """Ask the canary and hold the replies to `held_to`'s: the config's own, or for a speculative config the
        same model's without drafts (lossless: under greedy decoding its tokens are the target model's)."""
        replies = ask(url, protocol, canary.PROMPTS, canary.MAX_TOKENS, model, concurrency=len(canary.PROMPTS),
                      timeout_s=self.timeout_s)
        failed = [r.error for r in replies if r.error]
        if failed:
            done.canary_note = f"canary not run: {len(failed)} of {len(replies)} prompts failed ({failed[0]})"
            return
        done.replies = replies
        held_to = done.held_to = held_to or done.config
        unit = unit_of(replies)
        recorded = store.canary(held_to)
        if recorded and store.canary_asked(held_to) != canary.asked_id():
            done.canary_note = ("canary: the reference replies answered other prompts (recorded by another version); "
                                "not compared: record them again with --update-baselines")
            return
        reference = recorded if store.canary_unit(held_to) == unit else []
        if not reference and held_to != done.config:
            # The night its lossless reference is first recorded: that config's launches of tonight are the target's.
            reference = [[list(r.pieces) for r in a.replies] for a in self.launches.values()
                         if a.config == held_to and a.replies and a.invalid is None and unit_of(a.replies) == unit]
        if not reference:
            whose = "" if held_to == done.config else f" of {held_to}"
            done.canary_note = (f"canary: no reference replies{whose} yet (recorded with --update-baselines; 5 "
                                "launches calibrate it)")
            return
        rule = canary.calibrate(reference)
        checked = canary.check(rule, reference[0], [r.pieces for r in replies], unit=unit)
        if not checked.compared:  # nothing to hold the launch to: never "held", never "failed"
            done.canary_note = (f"canary not usable: every prompt's {len(reference)} reference launches part at their "
                                f"first {unit} (a nondeterministic engine or build); record again with "
                                "--update-baselines, or turn it off with --glm5-no-canary")
            return
        done.canary = checked

    def _accuracy(self, url: str, protocol: str, model: str, store: AnswerStore, done: LaunchAnswers) -> None:
        qs = self.questions
        replies = ask(url, protocol, [q.prompt for q in qs], ACCURACY_MAX_TOKENS, model, concurrency=32,
                      timeout_s=self.timeout_s)
        failed = [r.error for r in replies if r.error]
        if failed:
            done.accuracy_note = f"accuracy not measured: {len(failed)} of {len(qs)} questions failed ({failed[0]})"
            return
        done.right = [correct(r.text, q) for r, q in zip(replies, qs, strict=True)]
        done.tokens = [r.tokens for r in replies]
        ref = store.accuracy(done.config)
        share = f"{sum(done.right)} of {len(qs)} right ({100 * sum(done.right) / len(qs):.1f}%)"
        if ref is None:
            done.accuracy_note = f"accuracy {share} on {self.accuracy_name}: no reference yet (--update-baselines)"
        elif ref.get("set") != self.accuracy_name or ref.get("ids") != [q.id for q in qs]:
            done.accuracy_note = (f"accuracy {share} on {self.accuracy_name}: the reference was recorded on "
                                  f"{ref.get('set')}; not compared (record it with --update-baselines)")
        else:
            done.accuracy = judge_accuracy([c == "1" for c in ref["right"]], done.right,
                                           [float(x) for x in ref["tokens"]], [float(x) for x in done.tokens],
                                           self.alpha)

    def record(self) -> None:
        """--update-baselines: every config whose launches answered right adds their canary replies (up to the cap)
        and its accuracy; a config with a wrong launch is not recorded, and `recorded` says so."""
        if not self.recording:
            return
        self.recording = False  # once: an xdist worker's session closes twice
        out = self.recorded
        written: dict[Path, AnswerStore] = {}  # the files this recording changed
        for config, launches in self._by_config().items():
            wrong = next((a.invalid for a in launches if a.invalid), None)
            if wrong:
                out.append(f"{config}: answers not recorded, nor its figures: {wrong}")
                continue
            store = next((a.store for a in launches if a.store is not None), None)
            if store is None:
                continue
            written[store.path] = store
            for a in launches:
                if a.replies and a.held_to in ("", config):  # a speculative config's are held to another's
                    store.add_canary(config, [list(r.pieces) for r in a.replies], unit_of(a.replies),
                                     canary.asked_id())
                if a.right and self.questions:
                    store.set_accuracy(config, self.accuracy_name, [q.id for q in self.questions], a.right, a.tokens)
            held = next((a.held_to for a in launches if a.held_to not in ("", config)), None)
            kept = len(store.canary(config))
            out.append(f"{config}: answers recorded in {store.path.name} (canary: "
                       + (f"held to {held}'s replies, the same model without drafts)" if held else
                          f"{kept} reference launches"
                          f"{'' if kept >= canary.MIN_LAUNCHES else f'; {canary.MIN_LAUNCHES} calibrate it'})"))
        for store in written.values():
            mine = sorted(store.changed)
            try:
                store.save()
            except (AnswersError, OSError, Timeout) as exc:
                self.errors.append(f"answers file {store.path} not written: {exc}; nothing of {', '.join(mine)} "
                                   "recorded (its correctness could not be established)")
                out.append(self.errors[-1])
                self.unwritten.update(mine)

    def recordable(self, verdicts: list[Verdict]) -> list[Verdict]:
        """The verdicts --update-baselines may record: none of a config whose reference answers could not be
        written (its figures would be held to no answers tomorrow)."""
        return [v for v in verdicts if v.config not in self.unwritten]

    def to_dict(self) -> dict[str, list[Any]]:
        """What an xdist worker hands the controller (the run document's `answers`)."""
        return {"lines": self.lines(), "recorded": self.recorded, "errors": self.errors,
                "unchecked": [[c, why] for c, why in self.unchecked().items()], "unwritten": sorted(self.unwritten)}

    def join(self, told: dict[str, list[Any]]) -> None:
        """xdist's controller: a worker's answers (its document's `answers`), shown and counted as this run's."""
        self.told += told.get("lines") or []
        self.recorded += told.get("recorded") or []
        self.errors += told.get("errors") or []
        self.told_unchecked.update({str(c): str(why) for c, why in told.get("unchecked") or []})
        self.unwritten.update(str(c) for c in told.get("unwritten") or [])

    def lines(self) -> list[str]:
        """The summary's answer lines, a config at a time: each failed canary, the others counted, the accuracy
        (then what the xdist workers told)."""
        out: list[str] = []
        for config, mine in self._by_config().items():
            checked = [a.canary for a in mine if a.canary is not None]
            out += [f"{config}: {c.line()}" for c in checked if not c.ok]
            held = [c for c in checked if c.ok]
            if held:
                out.append(f"{config}: canary held on {len(held)} of {len(mine)} launches: {held[-1].line()}")
            notes = dict.fromkeys(a.canary_note for a in mine if a.canary is None and a.canary_note)
            out += [f"{config}: {note} ({len(mine)} launches)" for note in notes]
            out += [f"{config}: {a.accuracy.line() if a.accuracy else a.accuracy_note}" for a in mine
                    if a.accuracy is not None or a.accuracy_note]
        return out + self.told
