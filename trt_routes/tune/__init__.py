"""Tuning: the coordinator that executes a plan (apply), one job's reference and trials, and the one place a
lock entry is built. May import execute/, plan/, selection/, search/ and below; never report/, audit/ or cli/."""
