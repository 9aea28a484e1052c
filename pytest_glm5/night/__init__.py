"""The books of a night and of nights: what a launch costs and what fits the budget (plan.py), and which configs
tonight runs so every config is judged within its cover (schedule.py). It reads the judge's verdicts and baselines;
the judge never reads it."""
