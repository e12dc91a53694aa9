"""Executors: the only code that runs backends' build and measure, always in isolated workers."""
