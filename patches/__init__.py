"""The patch registry: one TOML file per patch, read by fi_patcher.registry."""
