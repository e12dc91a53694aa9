"""The command line: parse flags into typed options, call one library function, hand the result to a renderer.
The only package that imports typer, and the one place where errors become exit codes (``app``; the table is
``trt_routes.errors.Exit``). ``app`` puts together tune (validate, schema, knobs, plan, apply), audit (status,
explain, report), lock and cache; ``common`` holds the shared flags and output. Business rules belong in the
library (e.g. ``ApplyOptions.from_flags``), not here."""
