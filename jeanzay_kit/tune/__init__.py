"""jzk tune: Optuna studies whose tasks ask for trials and train them as runs."""
