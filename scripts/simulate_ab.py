#!/usr/bin/env python3
"""`--glm5-ab` with and without the box's variance model, side by side (issue 39): launches per arm until a 10%
difference reads DIFFERENT and an unchanged build reads SAME, at launch-to-launch CV 2% and 5%, through the plugin's
own decision (decide.ab at each look of the A/B's ABBA blocks, the family decision over the run's configs).

What is modelled: each launch one log-normal draw at the cell's CV (B slower by the difference); ABBA blocks add two
launches per arm a look, at most --blocks looks (the default --glm5-max-repeats 8: 4 blocks), at alpha 0.01 with the
A/B's 2% tolerance and 5% SAME margin. "Without" is what `--glm5-ab` did before issue 39: each arm's own launches
are its spread. "With" is what it does on a box with baselines: each trial fits judge/variance.py's model from
--series recorded references of --reference launches at the same CV (as a baselines file holds them), and the
series borrows what its family lends. Nothing else differs.

    python scripts/simulate_ab.py                         # the table in docs/verdicts.md, 2000 trials a cell
    python scripts/simulate_ab.py --trials 200 --json ab.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_glm5.judge.decide import AB_TOLERANCE, ab  # noqa: E402
from pytest_glm5.judge.family import family  # noqa: E402
from pytest_glm5.judge.looks import Look  # noqa: E402
from pytest_glm5.judge.variance import Spread, VarianceModel  # noqa: E402
from pytest_glm5.judge.verdicts import Kind  # noqa: E402

METRIC = "output_throughput"


def lent(rng: random.Random, cv: float, series: int, reference: int) -> Spread | None:
    """What the family lends one series on a box whose baselines hold `series` references of `reference` launches."""
    refs = {("c1", METRIC, f"cfg{i}"): [math.exp(rng.gauss(0.0, cv)) for _ in range(reference)]
            for i in range(series)}
    return VarianceModel.fit(refs).spread("c1", METRIC, "new-config")


def trial(rng: random.Random, cv: float, diff: float, blocks: int, alpha: float,
          pooled: Spread | None) -> tuple[str, int]:
    """One A/B run: its answer (SAME, DIFFERENT/worse, ...; UNKNOWN when the looks ran out) and launches per arm."""
    a: list[float] = []
    b: list[float] = []
    answer = "UNKNOWN"
    for look in range(1, blocks + 1):
        for _ in range(2):
            a.append(math.exp(rng.gauss(0.0, cv)))
            b.append((1 - diff) * math.exp(rng.gauss(0.0, cv)))
        v = ab("t", "c1", METRIC, list(a), list(b), ("A", "B"), list(b), Look(alpha, look, blocks, 0.05),
               AB_TOLERANCE, pooled=pooled)
        decided = family([v], alpha).verdicts[0]
        answer = str(decided.stat.get("answer"))
        if answer != "UNKNOWN" or decided.verdict != Kind.UNRESOLVED:
            break
    return answer, len(a)


def cell(cv: float, diff: float, model: bool, args: argparse.Namespace) -> dict[str, Any]:
    """The trials of one (CV, difference, with or without the model) cell and its row."""
    rng = random.Random(f"{args.seed}/{cv}/{diff}")  # the same launches with and without the model
    answers: list[str] = []
    used: list[int] = []
    for _ in range(args.trials):
        pooled = lent(rng, cv, args.series, args.reference) if model else None
        answer, n = trial(rng, cv, diff, args.blocks, args.alpha, pooled)
        answers.append(answer)
        used.append(n)
    want = "DIFFERENT/worse" if diff else "SAME"
    right = [n for x, n in zip(answers, used, strict=True) if x == want]
    return {"cv": cv, "difference": diff, "model": model, "trials": args.trials, "want": want,
            "decided_share": round(len(right) / args.trials, 3),
            # The gate's wrong answers: a regression where B is unchanged, SAME or better where it is slower.
            "wrong_share": round(sum(x == "DIFFERENT/worse" if not diff else x in ("SAME", "DIFFERENT/better")
                                     for x in answers) / args.trials, 4),
            "median_launches_per_arm": statistics.median(right) if right else None,
            "mean_launches_per_arm": round(statistics.fmean(used), 2)}


def table(rows: Sequence[dict[str, Any]], args: argparse.Namespace) -> str:
    """The markdown table docs/verdicts.md keeps."""
    out = ["| launch CV | B vs A | variance | answered right | median launches/arm to it | mean launches/arm | "
           "wrong answer (a regression of an unchanged B; SAME or better of a slower one) |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {float(r['cv']) * 100:g}% | {-float(r['difference']) * 100:+g}% (want {r['want']}) | "
                   f"{'pooled model' if r['model'] else 'own arms'} | {float(r['decided_share']) * 100:.1f}% | "
                   f"{r['median_launches_per_arm']} | {r['mean_launches_per_arm']} | "
                   f"{float(r['wrong_share']) * 100:.2f}% |")
    out.append(f"\n{args.trials} trials a cell; ABBA blocks, at most {args.blocks} looks ({2 * args.blocks} launches "
               f"per arm); alpha {args.alpha}; tolerance {AB_TOLERANCE * 100:g}%, SAME margin 5%; the model fitted "
               f"from {args.series} references of {args.reference} launches at the cell's CV")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the side-by-side table (and write --json)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cv", type=float, nargs="+", default=[0.02, 0.05])
    ap.add_argument("--difference", type=float, nargs="+", default=[0.10, 0.0], help="B slower by (0.10: 10%%)")
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--blocks", type=int, default=4, help="ABBA looks at most (default 4: --glm5-max-repeats 8)")
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--series", type=int, default=10, help="recorded references the model is fitted from")
    ap.add_argument("--reference", type=int, default=12, help="launches of each recorded reference")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.trials < 1 or args.blocks < 1 or args.series < 1 or args.reference < 2:
        ap.error("--trials, --blocks and --series must be at least 1, --reference at least 2")
    rows = [cell(cv, d, model, args) for cv in args.cv for d in args.difference for model in (False, True)]
    print(table(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
