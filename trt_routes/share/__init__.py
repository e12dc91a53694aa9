"""Sharing the trial cache between machines: bundles, merging, remotes, tuning-cache imports, and the cache
maintenance commands (stats, gc, verify). Everything it reads from outside is verified before it is merged;
it never runs a build."""

#: how pydantic checks a report dataclass that is a ``--json`` document (report/documents.py): no key but its
#: fields, and the schema lists every field as always present
AS_DOCUMENT = {"extra": "forbid", "json_schema_serialization_defaults_required": True}
