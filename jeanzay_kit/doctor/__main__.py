"""`python -m jeanzay_kit.doctor`: the doctor's task in a Slurm job step (doctor/launch.py)."""

import os
import sys

from jeanzay_kit.doctor.launch import task_main

if __name__ == "__main__":
    sys.exit(task_main(sys.argv[1:], dict(os.environ)))
