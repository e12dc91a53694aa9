"""The command line: parse flags into typed options, call one library function, hand the result to a renderer.
The only package that imports typer, and the one place where errors become exit codes (see ``errors.EXIT``)."""
