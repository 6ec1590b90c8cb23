"""Kernel IR and its lowerings."""
