"""Checkers for the inference chapter."""
