"""Audit: read-only views of what was decided and why: ``explain`` (one job's trials and verdicts) and
``status`` (lockfile against cache against engines on disk). Writes nothing."""
