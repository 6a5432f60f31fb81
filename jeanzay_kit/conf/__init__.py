"""The shipped Hydra configs (found as pkg://jeanzay_kit.conf). A package so that
importlib.resources, and so Hydra, can read them from an installed wheel."""
