"""The output formats the toolkit asks squeue and sacct for, so that the command
(slurm/commands.py) and the parser of its rows (launch/status.py) agree. Pure data."""

# squeue -h -r -o: job id (array tasks as <job>_<task>), state, elapsed, limit, reason/nodes.
SQUEUE_FORMAT = "%i|%T|%M|%l|%R"
# sacct -X -n -P -o: allocations only, '|'-separated.
SACCT_FIELDS = "JobID,State,Elapsed,ExitCode,NodeList"
