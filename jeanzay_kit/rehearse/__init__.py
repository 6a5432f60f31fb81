"""`jzk rehearse`: a seeded schedule of faults on a run of your own, before you spend an
allocation on it (docs/rehearse.md): faults.json first (the same seed replays the same
rehearsal), then the run under it, then rehearsal.json (what each fault cost, and
whether the run ended with the model of the same run without faults)."""
