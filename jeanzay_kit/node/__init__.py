"""The task side: what runs on the nodes. The entry point (entry.py), one training
process (worker.py), the local launcher, restarts, the torchrun agent and the task a
submitit job runs. Nothing here imports the submit side (launch/)."""
