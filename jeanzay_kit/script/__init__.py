"""Your own script (`job.entry`), what both sides know of it: its command and identity
(script_rules.py, pure), whether it is a Hydra app (hydra_app_rules.py, pure), the files
it leaves in its run directory and its sibling runs (script_files.py) and its entry
checked before a job is queued (entry.py). node/script_task.py runs it."""
