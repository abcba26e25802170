"""Adapters that put lopti's algorithms into other training frameworks (verl)."""
