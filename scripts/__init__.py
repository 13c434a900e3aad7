"""Gaia's own scripts: a package, so the modules under it import one another as any package
does, and import-linter checks them with the rest of the house."""
