"""Example task modules and the texts the demo counts."""
