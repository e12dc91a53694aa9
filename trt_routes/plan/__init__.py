"""Planning: the pure diff of manifest jobs x trial cache x lockfile x environment (diff) and saved plans for
``plan --out`` / ``apply --plan`` (saved). Builds nothing; imports no backend and no executor."""
