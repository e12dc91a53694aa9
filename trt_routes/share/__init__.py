"""Sharing the trial cache between machines: bundles, merging, remotes, tuning-cache imports, and the cache
maintenance commands (stats, gc, verify). Everything it reads from outside is verified before it is merged;
it never runs a build."""
