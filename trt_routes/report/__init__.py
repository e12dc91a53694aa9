"""Rendering: rich tables and progress on a terminal, plain lines elsewhere, JSON on request."""
