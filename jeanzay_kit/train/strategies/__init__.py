"""Parallel strategies, one small module each, chosen by parallel.mode."""

from __future__ import annotations

from jeanzay_kit.train.strategies.base import Strategy

__all__ = ["Strategy"]
