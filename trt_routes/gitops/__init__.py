"""GitOps over tuning.lock: show one entry (show), check the lockfile against the manifest (check) and
rebuild the locked routes on a fresh machine (frozen, ``apply --frozen``)."""
