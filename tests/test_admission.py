"""judge/admission.py: the ordered rules that say whether a figure is the build's speed, value in, value out."""

from __future__ import annotations

from pytest_glm5.judge import admission
from pytest_glm5.judge.admission import Evidence, admit
from pytest_glm5.judge.verdicts import Bound, Kind, Verdict

BOUND = Bound("output_throughput", "floor", 100.0, 0.05, power={"limit_w": 600.0, "cap_share": 0.4})


def verdict(kind: str = Kind.REGRESSION) -> Verdict:
    return Verdict("tp8", "single", "output_throughput", 90.0, BOUND, kind)


def busy(metric: str, tolerance: float) -> str:
    return "client-bound: the load client was kept from its CPU"


def test_no_evidence_leaves_the_verdict_as_its_test_read_it() -> None:
    v = admit(verdict(), BOUND, 0.05, Evidence())
    assert (v.verdict, v.note, v.reason) == (Kind.REGRESSION, "", None)


def test_a_wrong_build_is_invalid_whatever_else_holds() -> None:
    # Invalid is asked after client-bound, and replaces it: a build that answers wrong has no speed at all.
    ev = Evidence(client=busy, apart=(Kind.INVALID, "faster, but wrong: canary failed: 3 of 16 prompts diverged "
                                                    "within their first 12 tokens (first at token 2)"))
    v = admit(verdict(), BOUND, 0.05, ev)
    assert v.verdict == Kind.INVALID and v.reason is not None
    assert v.reason.short == "canary failed: 3 of 16 prompts diverged within their first 12 tokens"
    assert v.reason.detail == "the figure alone would read client-bound, -10.0% from its bound"


def test_a_client_bound_figure_is_not_called_throttled_and_a_judged_one_is() -> None:
    apart = (Kind.THROTTLED, "throttled: not comparable (GPU 0 hw_thermal 1.2 s of 60 s)")
    assert admit(verdict(), BOUND, 0.05, Evidence(client=busy, apart=apart)).verdict == Kind.CLIENT_BOUND
    assert admit(verdict(), BOUND, 0.05, Evidence(apart=apart)).verdict == Kind.THROTTLED
    assert admit(verdict(Kind.NEW), None, 0.05, Evidence(apart=apart)).verdict == Kind.THROTTLED


def test_a_power_regime_that_moved_is_named_and_the_verdict_stands() -> None:
    v = admit(verdict(), BOUND, 0.05, Evidence(power={"limit_w": 450.0, "cap_share": 0.97}))
    assert v.verdict == Kind.REGRESSION
    assert v.note == "likely cause: the enforced power limit changed (600 W to 450 W a GPU)"
    v = admit(verdict(Kind.PASS), BOUND, 0.05, Evidence(power={"limit_w": 450.0, "cap_share": 0.97}))
    assert v.note == ""  # a pass has no change to explain


def test_the_rules_run_in_the_table_order_until_a_final_one() -> None:
    asked: list[str] = []

    def rule(name: str, final: bool) -> admission.Rule:
        def r(v: Verdict, bound: Bound | None, tolerance: float, ev: Evidence) -> admission.Admitted:
            asked.append(name)
            return admission.Admitted(None, name, final=final)
        return r

    v = admit(verdict(), BOUND, 0.05, Evidence(), rules=[rule("a", False), rule("b", True), rule("c", True)])
    assert asked == ["a", "b"] and v.note == "b"
    assert admission.RULES[0] is admission.client_bound and admission.RULES[1] is admission.invalid


def test_only_an_open_loops_arrivals_are_what_a_busy_host_holds_back() -> None:
    from pytest_glm5.judge import held

    # Named among what a launch observes, so a renamed figure cannot silently become the server's (or the host's).
    assert set(held.OBSERVED.values()) >= held.HOST_HELD
    seen = {name: 1.0 for name in held.OBSERVED.values()}
    assert set(held.beyond_the_host(seen)) == set(held.OBSERVED.values()) - held.HOST_HELD
    assert {"prefix_hit", "input_tokens", "reasoning_tokens"} <= set(held.beyond_the_host(seen))
