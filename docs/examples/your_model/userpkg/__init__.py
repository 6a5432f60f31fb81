"""A user's own project: a dataset, models and nothing of jeanzay_kit's."""
