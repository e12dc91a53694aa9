"""Selection: the pure ranking of a job's trials (rank), side-by-side confirmation against the default
route (confirm) and the final decision that combines them (final). Pure functions over trials: no backend, no
executor, no writes."""
