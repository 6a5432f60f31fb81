"""The run directory's room: what both sides of a job know of a run directory. Its files'
names and who writes each (run_layout), the folder as one object (run_directory's
`RunDir`, what is passed from where a path enters), the records read there (beats,
progress, rank_lines) and the one writer's lease (lease, lease_rules)."""
