"""What a test calls and what runs behind it: the `perf` and `bench` fixtures and the config's rounds (fixture.py),
one load watched for hangs and crashes (measurement.py), and whether a launch answers right before its figures count
(answering.py)."""
