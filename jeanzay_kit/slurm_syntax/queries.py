"""The output formats the toolkit asks squeue and sacct for, so that the command
(slurm/commands.py) and the parser of its rows (launch/status.py) agree. Pure data."""

# squeue -h -r -o: job id (array tasks as <job>_<task>), state, elapsed, limit, reason/nodes.
SQUEUE_FORMAT = "%i|%T|%M|%l|%R"
# sacct -X -n -P -o: allocations only, '|'-separated.
SACCT_FIELDS = "JobID,State,Elapsed,ExitCode,NodeList"
# sacct -X -n -P --duplicates -o: every attempt of each allocation (a requeued job has one
# row per start), with what it used: ElapsedRaw in seconds, AllocTRES with gres/gpu=N, and
# when it was submitted (or requeued) and started: the queue wait.
SACCT_USAGE_FIELDS = "JobID,State,Elapsed,ExitCode,NodeList,ElapsedRaw,AllocTRES,Submit,Start"
