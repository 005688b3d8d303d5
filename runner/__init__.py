"""Processes and time: coordinator, workers, supervisor, wake-ups."""
