"""How an attempt ends, in one room (docs/architecture.md, "What happens at a preemption").

codes.py is the table: each stop signal (what it means, who passes it on) and the `Exit`
codes every process of the toolkit ends with. preemption.py: the stop flag a signal sets
and the ranks' agreement to stop at a step boundary. requeue.py: the one path that asks
Slurm for the next attempt. ending_rules.py: why an attempt ended, and whether another
may pass (pure); endings.py: what a run directory records of it (ends, restarts, outcome)
and the one rule after a failed attempt (retry_after_failure).
signal_rules.py: which signals a script task passes on (pure).
"""
