"""The correctness wing, value in and value out: grading hand-made replies, GSM8K's file, the generated set and its
solver, McNemar's false-alarm rate over null runs and its power, the canary's rule against the emulated model's
late-token nondeterminism and its garbage fault."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pytest_glm5.correctness import canary
from pytest_glm5.correctness.paired import judge_accuracy, mcnemar_p, power
from pytest_glm5.correctness.questions import QuestionsError, generate, grade, load_jsonl, solve
from pytest_glm5.sim.answers import Answers


@pytest.mark.parametrize(("reply", "answer"), [
    ("She has 3 boxes of 12, so 36 pens. The answer is 36.", "36"),
    ("The answer is $1,234.", "1234"),  # a dollar sign and a comma
    ("The answer is: 18 apples", "18"),  # words after the number
    ("... 5 + 7 = 12 ... The answer is 12.0", "12"),  # a trailing .0 is the same number
    ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72"),  # GSM8K's own form
    ("first 10, then 20, so in all 30", "30"),  # no cue: the last number
    ("The answer is -4.", "-4"),
    ("The answer is 2.5 hours", "2.5"),
    ("I cannot tell.", None),
])
def test_a_reply_is_graded_by_its_final_answer(reply: str, answer: str | None) -> None:
    assert grade(reply) == answer


def test_generated_questions_are_stable_and_solvable() -> None:
    a, b = generate(300, seed=4), generate(300, seed=4)
    assert a == b and generate(300, seed=5) != a  # the same set on every machine, another seed another set
    assert len({q.id for q in a}) == 300
    assert all(solve(q.prompt) == q.answer for q in a)  # the emulator's "model" knows them
    assert solve("The capital of France is") is None


def test_gsm8k_jsonl_is_read_and_bad_lines_are_named(tmp_path: Path) -> None:
    good = tmp_path / "test.jsonl"
    good.write_text('{"question": "Two and two?", "answer": "2+2=4\\n#### 4"}\n\n'
                    '{"question": "Big?", "answer": "#### 1,000"}\n', encoding="utf-8")
    qs = load_jsonl(good)
    assert [q.answer for q in qs] == ["4", "1000"] and qs[0].id == "test-1"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "x", "answer": "#### 1"}\n{"q": "no answer"}\n', encoding="utf-8")
    with pytest.raises(QuestionsError, match=r"bad.jsonl:2: not a GSM8K line"):
        load_jsonl(bad)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"question": "caf\xe9?", "answer": "#### 1"}\n')  # an INTERNALERROR before
    with pytest.raises(QuestionsError, match=r"question file .*latin.jsonl: not UTF-8 text: byte 0xe9"):
        load_jsonl(latin)


def test_mcnemar_false_alarms_stay_under_alpha_over_2000_null_runs() -> None:
    # Unchanged builds: a tenth of the questions answered afresh each run (as sampling noise and batch variance
    # do), the same accuracy both sides. The exact one-sided test may call a drop at most alpha of the time.
    rng = random.Random(11)
    alpha, n, acc = 0.01, 400, 0.85
    alarms = 0
    for _ in range(2000):
        ref = [rng.random() < acc for _ in range(n)]
        today = [rng.random() < acc if rng.random() < 0.1 else r for r in ref]
        alarms += judge_accuracy(ref, today, [50.0] * n, [50.0] * n, alpha).dropped
    assert alarms / 2000 <= alpha, alarms


def test_mcnemar_finds_the_drops_the_docs_promise() -> None:
    # docs/correctness.md: n = 400 finds a 5-point drop, n = 1,319 a 2-point one (5% of answers redrawn a run).
    assert power(400, 0.9, 0.05, 0.01, flip=0.05, sims=300) >= 0.95
    assert power(1319, 0.9, 0.02, 0.01, flip=0.05, sims=300) >= 0.9
    assert mcnemar_p(0, 0) == 1.0 and mcnemar_p(10, 0) < 0.001 and mcnemar_p(5, 5) > 0.5


def test_the_length_guard_catches_a_shorter_answer() -> None:
    same = [True] * 50
    short = judge_accuracy(same, same, [100.0] * 50, [85.0] * 50, 0.01)
    assert short.failed and not short.dropped and "-15%" in short.line()
    assert not judge_accuracy(same, same, [100.0] * 50, [95.0] * 50, 0.01).failed


def _launch(**faults: float) -> list[tuple[str, ...]]:
    model = Answers(seed=0, fault_rng=random.Random(random.random()), **faults)
    return [tuple(model.reply(p, canary.MAX_TOKENS)) for p in canary.PROMPTS]


def test_the_canary_ignores_late_ties_and_catches_garbage() -> None:
    random.seed(5)
    ref = [_launch(nondeterminism=0.5) for _ in range(canary.MIN_LAUNCHES)]
    rule = canary.calibrate(ref)
    assert rule.calibrated and 1 <= rule.prefix < canary.MAX_TOKENS
    # Unchanged launches with half their replies broken at a late near-tie: no alarm in 200.
    assert all(canary.check(rule, ref[0], _launch(nondeterminism=0.5)).ok for _ in range(200))
    # A build corrupting 5% of its tokens fails nearly every launch and names where.
    bad = [canary.check(rule, ref[0], _launch(garbage=0.05, nondeterminism=0.5)) for _ in range(50)]
    assert sum(not c.ok for c in bad) >= 48
    line = next(c for c in bad if not c.ok).line()
    assert line.startswith("canary failed: ") and " at token " in line and " expected, " in line


def test_too_few_reference_launches_only_catch_a_gross_failure() -> None:
    ref = [_launch() for _ in range(2)]
    rule = canary.calibrate(ref)
    assert not rule.calibrated and "2 of 5 reference launches" in rule.describe()
    assert canary.check(rule, ref[0], _launch(garbage=0.05)).ok  # a few wrong tokens: not gross
    assert not canary.check(rule, ref[0], _launch(garbage=0.9)).ok  # nearly every first token wrong


def test_an_accuracy_set_file_is_found_where_pytest_was_invoked(tmp_path: Path) -> None:
    from pytest_glm5.perf.answering import parse_accuracy_set

    (tmp_path / "q.jsonl").write_text('{"question": "Two and two?", "answer": "#### 4"}\n', encoding="utf-8")
    name, qs = parse_accuracy_set("q.jsonl", tmp_path)
    assert name == "q.jsonl" and [q.answer for q in qs] == ["4"]
    assert parse_accuracy_set("generated:3:7", tmp_path)[0] == "generated:3:7"
    with pytest.raises(QuestionsError, match=rf"no such file \({tmp_path}/nope.jsonl\)"):
        parse_accuracy_set("nope.jsonl", tmp_path)


def test_answers_are_recorded_once_and_two_writers_keep_both(tmp_path: Path) -> None:
    from pytest_glm5.correctness.answers import AnswerStore
    from pytest_glm5.load.replies import Reply
    from pytest_glm5.perf.answering import Answering, LaunchAnswers

    path = tmp_path / "hw" / "m.answers.json"
    runs = []
    for config in ("a", "b"):  # two xdist workers, one config each, the same model's file
        run = Answering(tmp_path, True, None, 0.01, recording=True)
        run.launches["l"] = LaunchAnswers(config, "l", store=AnswerStore(path), canary_note="canary: no reference",
                                          replies=[Reply("x", (1, 2), 2), Reply("y", (3,), 1)])
        runs.append(run)
    for run in runs:
        run.record()
        run.record()  # an xdist worker's session closes twice: recorded once
        assert run.recorded == [f"{run.launches['l'].config}: answers recorded in m.answers.json (canary: 1 "
                                "reference launches; 5 calibrate it)"]
    kept = AnswerStore(path)
    assert kept.canary("a") == kept.canary("b") == [[[1, 2], [3]]]
    # The controller shows and counts what each worker told: its lines, what it recorded, its errors.
    runs[1].errors.append("answers file x not written: read-only")
    controller = Answering(tmp_path, True, None, 0.01, recording=True)
    for run in runs:
        controller.join(json.loads(json.dumps(run.to_dict())))
    controller.record()
    assert controller.recorded == [*runs[0].recorded, *runs[1].recorded]
    assert controller.errors == ["answers file x not written: read-only"]
    assert controller.lines() == ["a: canary: no reference (1 launches)", "b: canary: no reference (1 launches)"]


def test_a_reference_of_other_prompts_is_never_compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_glm5.correctness import canary
    from pytest_glm5.correctness.answers import AnswerStore
    from pytest_glm5.load.replies import Reply
    from pytest_glm5.perf import answering

    store = AnswerStore(tmp_path / "m.answers.json")
    for _ in range(5):
        store.add_canary("t", [[1, 2, 3]] * len(canary.PROMPTS), "tokens", asked="older-prompts")
    replies = [Reply("x", (9, 9, 9), 3)] * len(canary.PROMPTS)  # would diverge at token 0 from the reference
    monkeypatch.setattr(answering, "ask", lambda *args, **kwargs: replies)
    run = answering.Answering(tmp_path, True, None, 0.01, recording=True)
    done = answering.LaunchAnswers("t", "l")
    run._canary("http://127.0.0.1:1", "generate", "m", store, done)
    assert done.canary is None and done.invalid is None
    assert done.canary_note.startswith("canary: the reference replies answered other prompts")
    # Recording them starts a new reference of today's prompts instead of mixing the two.
    store.add_canary("t", [list(r.pieces) for r in replies], "tokens", canary.asked_id())
    assert store.canary("t") == [[[9, 9, 9]] * len(canary.PROMPTS)] and store.canary_asked("t") == canary.asked_id()
    assert canary.asked_id() != canary.asked_id(canary.PROMPTS[:-1]) != canary.asked_id(max_tokens=16)


def test_one_piece_replies_that_repeat_are_checked_and_a_canary_with_nothing_to_compare_never_holds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_glm5.correctness.answers import AnswerStore
    from pytest_glm5.load.replies import Reply
    from pytest_glm5.perf import answering

    # A random model's run-on reply is one word: every launch repeats it whole, so it is compared, not left out.
    same = [[("gmwgmwgmw",)] * 16 for _ in range(5)]
    rule = canary.calibrate(same)
    assert rule.left_out == () and rule.prefix == 1 and rule.allowed == 1
    assert canary.check(rule, same[0], [("gmwgmwgmw",)] * 16).ok
    other = canary.check(rule, same[0], [("xq",)] * 16)
    assert not other.ok and other.diverged[0].at == 0
    # References that part at once are left out; where all part, the launch is held to nothing: a note, not "held".
    split = [[(f"w{k}",)] * 16 for k in range(5)]
    assert len(canary.calibrate(split).left_out) == 16
    store = AnswerStore(tmp_path / "m.answers.json")
    for launch in split:
        store.add_canary("t", [list(r) for r in launch], "words", canary.asked_id())
    monkeypatch.setattr(answering, "ask", lambda *args, **kwargs: [Reply("w0", None, 1)] * 16)
    done = answering.LaunchAnswers("t", "l")
    answering.Answering(tmp_path, True, None, 0.01, recording=False)._canary("u", "openai", "m", store, done)
    assert done.canary is None and done.invalid is None
    assert done.canary_note.startswith("canary not usable: every prompt's 5 reference launches part at their first "
                                       "words")


def _changed_from(launch: list[tuple[str, ...]], at: int) -> list[tuple[str, ...]]:
    return [r[:at] + tuple(f"x{w}" for w in r[at:]) if len(r) > at else r for r in launch]


def test_the_canary_compares_the_whole_agreed_reply() -> None:
    # Issue 40: every reply changed from token 20 on passed the canary (it compared half the shortest agreed prefix),
    # as did garbage in the second half of each reply. Both fail now; late ties of unchanged launches do not.
    random.seed(11)
    ref = [_launch(nondeterminism=0.5) for _ in range(canary.MIN_LAUNCHES)]
    rule = canary.calibrate(ref)
    assert rule.prefix <= 16 and min(rule.agreed) > 20, rule
    assert all(canary.check(rule, ref[0], _launch(nondeterminism=0.5)).ok for _ in range(200))
    at20 = [canary.check(rule, ref[0], _changed_from(_launch(nondeterminism=0.5), 20)) for _ in range(20)]
    assert not any(c.ok for c in at20) and all(len(c.late) == 16 and not c.early for c in at20)
    assert at20[0].line().startswith(f"canary failed: 16 of 16 prompts diverged late within their agreed replies "
                                     f"({rule.late_allowed} allowed: 5 reference launches; ")
    assert " at token 20: " in at20[0].line()
    assert not any(canary.check(rule, ref[0], _launch(garbage_late=0.3)).ok for _ in range(20))


def test_the_late_allowance_holds_its_false_alarm_rate_with_ties_anywhere() -> None:
    # Near-ties placed anywhere in a reply (not only late, as the emulator's are): a launch of the same build is one
    # more draw beside the references, so its late divergences stay within the Binomial(16, 1/5) allowance.
    rng = random.Random(3)
    base = [tuple(f"p{p}w{i}" for i in range(32)) for p in range(16)]

    def unchanged() -> list[tuple[str, ...]]:
        out = []
        for reply in base:
            at = rng.randrange(4, 32) if rng.random() < 0.4 else None  # a tie on 40% of the prompts, anywhere
            out.append(reply if at is None else (*reply[:at], "tie", *reply[at + 1:]))
        return out

    alarms = 0
    for _ in range(60):
        ref = [unchanged() for _ in range(5)]
        rule = canary.calibrate(ref)
        alarms += sum(len(canary.check(rule, ref[0], unchanged()).late) > rule.late_allowed for _ in range(50))
    assert rule.late_allowed == canary.late_allowance(16, 5) == 9
    assert alarms <= 3, f"{alarms} late alarms in 3000 unchanged launches"  # the bound: 3 expected at most (1e-3)
