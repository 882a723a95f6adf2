"""Adapters to agent frameworks; each needs its framework installed (an optional extra)."""
