"""Right answers, value in and value out: the question sets and grading, the paired accuracy test, the canary's
rule, and the answers file they are held to (answers.py). No HTTP (load/replies.py asks the server) and no verdicts
(perf/answering.py turns a wrong launch into INVALID)."""
